"""hvdkeras.build_horovod.builder: the one line a failed compile is reported with."""
import pytest

from hvdkeras.build_horovod import builder


@pytest.mark.parametrize("log,expected", [
    ("[ 40%] Building CXX object horovod/tensorflow/CMakeFiles/tensorflow.dir/xla_mpi_ops.cc.o\n"
     "/tmp/w/horovod-0.28.1/horovod/tensorflow/xla_mpi_ops.cc:27:10: fatal error: "
     "tensorflow/compiler/xla/client/xla_builder.h: No such file or directory\n   27 | #include\n",
     "horovod/tensorflow/xla_mpi_ops.cc:27:10: fatal error: tensorflow/compiler/xla/client/xla_builder.h: "
     "No such file or directory"),
    ("CMake Error at CMakeLists.txt:12 (find_package):\n", "CMake Error at CMakeLists.txt:12 (find_package):"),
    ("nothing useful\nlast words\n", "last words"),
])
def test_compile_error_is_the_first_error_line(log, expected):
    assert builder.compile_error(log, "/tmp/w/horovod-0.28.1") == expected


def test_compile_error_prefers_the_compiler_over_pip_and_file_names_with_error_in_them():
    log = ("  Building CXX object third_party/gloo/gloo/CMakeFiles/gloo.dir/transport/tcp/error.cc.o\n"
           "  error: subprocess-exited-with-error\n"
           "      /tmp/w/horovod-0.28.1/horovod/common/common.h:90:5: error: 'runtime_error' is not a member"
           " of 'std'\n")
    assert builder.compile_error(log, "/tmp/w/horovod-0.28.1") == \
        "horovod/common/common.h:90:5: error: 'runtime_error' is not a member of 'std'"
