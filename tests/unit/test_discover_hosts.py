"""hvdkeras.discover_hosts: the hosts file's lines, and the command as horovodrun runs it (through the shell)."""
import subprocess
import sys

from hvdkeras import discover_hosts


def test_host_lines_skip_blanks_and_comments():
    text = "# the pool\nhost1:4\n\n  host2:2  # joined later\nhost3\n   \n"
    assert discover_hosts.host_lines(text) == ["host1:4", "host2:2", "host3"]


def test_main_prints_the_file_named_by_the_variable(tmp_path, capsys):
    hosts = tmp_path / "pool.txt"
    hosts.write_text("a:4\n# b:4\n")
    assert discover_hosts.main(environ={"HVDKERAS_HOSTS_FILE": str(hosts)}) == 0
    assert capsys.readouterr().out == "a:4\n"


def test_a_missing_file_means_no_hosts_yet(tmp_path, capsys):
    assert discover_hosts.main(environ={"HVDKERAS_HOSTS_FILE": str(tmp_path / "absent")}) == 0
    assert capsys.readouterr().out == ""


def test_the_installed_command_runs_through_the_shell_as_horovodrun_runs_it(tmp_path):
    (tmp_path / "hosts.txt").write_text("localhost:2\n127.0.0.1:1\n")  # the default file, in the cwd
    command = discover_hosts.COMMAND.replace("python", sys.executable, 1)
    out = subprocess.run(command, shell=True, cwd=tmp_path, capture_output=True, text=True, timeout=60,
                         env={"PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["localhost:2", "127.0.0.1:1"]


def test_a_line_that_could_carry_a_command_is_left_out_saying_so(tmp_path, capsys):
    hosts = tmp_path / "pool.txt"
    hosts.write_text("a:4\nb;touch /tmp/pwn:2\n$(id)\nfd00::1:2\nc\n")
    assert discover_hosts.main(environ={"HVDKERAS_HOSTS_FILE": str(hosts)}) == 0
    out = capsys.readouterr()
    assert out.out == "a:4\nc\n"
    said = out.err.splitlines()
    assert len(said) == 3 and all(line.startswith(f"[hvdkeras] warning: left out: hosts file {hosts}: entry ")
                                  for line in said), said
    assert "IPv6" in said[2]


def test_a_hosts_file_that_cannot_be_read_or_an_argument_is_one_error_line_with_status_2(tmp_path, capsys):
    from hvdkeras.common.errors import shown

    folder = tmp_path / "hosts.d"
    folder.mkdir()
    assert discover_hosts.main([], environ={"HVDKERAS_HOSTS_FILE": str(folder)}) == 2
    binary = tmp_path / "hosts.bin"
    binary.write_bytes(b"\xff\xfe\x00host")
    assert discover_hosts.main([], environ={"HVDKERAS_HOSTS_FILE": str(binary)}) == 2
    assert discover_hosts.main(["--hosts", "a:2"], environ={}) == 2
    out = capsys.readouterr()
    said = out.err.splitlines()
    assert out.out == "" and len(said) == 3 and all(line.startswith("hvdkeras: error: ") for line in said), said
    assert said[0] == (f"hvdkeras: error: the hosts file {shown(str(folder), 300)} ($HVDKERAS_HOSTS_FILE) cannot be"
                       " read (Is a directory): make it a readable text file of host:slots lines")
    assert "(UnicodeDecodeError)" in said[1]
    assert said[2] == ("hvdkeras: error: python -m hvdkeras.discover_hosts takes no arguments; received: '--hosts'"
                       " (the hosts file is $HVDKERAS_HOSTS_FILE)")
    assert discover_hosts.main(["--help"], environ={}) == 0
    assert capsys.readouterr().out.startswith("usage: python -m hvdkeras.discover_hosts\n")
