"""Versions of the Spark path's packages that install together but cannot run together, each said in one line; and
what differs between pyspark versions (:func:`vectorized_udf`).

pip cannot see these: a package that does not declare what it needs at run time. Checked from the installed
packages' metadata, before anything is imported or sent to an executor.
"""
from __future__ import annotations

import importlib.metadata
from typing import Any, Callable, Optional

from hvdkeras.common.errors import SetupError

PYARROW_NEEDS_NUMPY_2 = 26  # pyarrow 26 and newer import only with NumPy 2 (their metadata does not say so)


def _major(version: Optional[str]) -> Optional[int]:
    try:
        return int(str(version).split(".")[0])
    except ValueError:
        return None


def _installed(name: str) -> Optional[str]:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def mismatch(version: Callable[[str], Optional[str]] = _installed) -> Optional[str]:
    """What cannot run together here, as one line with its fix; None when nothing is known to clash.

    Args:
        version: the installed version of a distribution, or None (default: this environment's).
    """
    pyarrow, numpy = version("pyarrow"), version("numpy")
    pyarrow_major, numpy_major = _major(pyarrow), _major(numpy)
    if pyarrow_major is not None and numpy_major is not None and pyarrow_major >= PYARROW_NEEDS_NUMPY_2 > 0 \
            and numpy_major < 2:
        return (f"pyarrow {pyarrow} needs NumPy 2, and this environment has NumPy {numpy} (TensorFlow 2.17 and"
                f" older, or pyspark 3.5's [sql] extra, keep NumPy 1): pip install 'pyarrow<{PYARROW_NEEDS_NUMPY_2}'")
    return None


def require_compatible(what: str) -> None:
    """Raises SetupError with :func:`mismatch`'s line, naming ``what`` could not run, when there is one."""
    found = mismatch()
    if found is not None:
        raise SetupError(f"{what} cannot run: {found}")


def vectorized_udf(arrow_body: Callable[..., Any], pandas_body: Callable[..., Any], return_type: Any) -> Any:
    """A scalar vectorized UDF: ``arrow_body`` on ``pyarrow`` arrays where pyspark has Arrow UDFs (4.1 and newer:
    no pandas conversion of each row's array), else ``pandas_body`` on pandas Series. Nondeterministic, so that
    Spark runs it once a row even when several columns read its result."""
    import warnings

    from pyspark.sql import functions

    if hasattr(functions, "arrow_udf"):
        from pyspark.sql.pandas import functions as pandas_functions

        scalar = getattr(pandas_functions, "ArrowUDFType").SCALAR  # noqa: B009 - absent from pyspark 3.5's stubs
        made = getattr(functions, "arrow_udf")(arrow_body, return_type, scalar)  # noqa: B009 - as above
    else:
        from pyspark.sql.functions import PandasUDFType

        with warnings.catch_warnings():  # its advice, type hints, cannot name a function of any number of columns
            warnings.simplefilter("ignore", UserWarning)
            made = functions.pandas_udf(pandas_body, return_type, PandasUDFType.SCALAR)
    return made.asNondeterministic()
