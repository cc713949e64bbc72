"""A table's declaration: its columns (name, pandas dtype, unit, meaning) and how a frame is made
to fit them (:meth:`TableSchema.conform`). Unknown values are nulls (pandas nullable dtypes), never
NaN. pandas, numpy and pyarrow are imported by the methods that use them, so declaring is free."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa


@dataclass(frozen=True)
class Column:
    """One column: pandas dtype (``string``, ``Int64``, ``Float64``, ``boolean``), unit, meaning."""

    name: str
    dtype: str
    unit: str
    description: str


@dataclass(frozen=True)
class TableSchema:
    name: str
    description: str
    key: tuple[str, ...]
    columns: tuple[Column, ...]

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]

    def arrow_schema(self) -> pa.Schema:
        import pyarrow as pa

        types = {"string": pa.string(), "Int64": pa.int64(), "Float64": pa.float64(), "boolean": pa.bool_()}
        fields = [
            pa.field(c.name, types[c.dtype], nullable=True, metadata={"unit": c.unit, "description": c.description})
            for c in self.columns
        ]
        return pa.schema(fields, metadata={"table": self.name, "description": self.description})

    def empty(self) -> pd.DataFrame:
        return _empty_frame(self).copy()  # many tables of a run are empty: built once per schema

    def rows_of(self, frames: list[pd.DataFrame]) -> pd.DataFrame:
        """The frames' rows as one frame (not conformed); this table's empty frame when none has a row."""
        import pandas as pd

        filled = [f for f in frames if len(f)]
        return pd.concat(filled, ignore_index=True) if filled else self.empty()

    def _conformed_already(self, df: pd.DataFrame) -> pd.DataFrame:
        """``df``, whose columns are the schema's with its dtypes, with NaN and inf made null; the rest is not copied."""
        import pandas as pd

        fixed = {}
        for c in self.columns:
            if c.dtype == "Float64":
                column = df[c.name]
                if (cleaned := _without_nan(column)) is not column:
                    fixed[c.name] = cleaned
        out = df.assign(**fixed) if fixed else df
        index = out.index
        if isinstance(index, pd.RangeIndex) and index.start == 0 and index.step == 1:
            return out
        return out.reset_index(drop=True)

    def conform(self, df: pd.DataFrame) -> pd.DataFrame:
        """Exactly the schema's columns, in order, with its dtypes; NaN and inf become null."""
        import pandas as pd

        missing = [c for c in self.names if c not in df.columns]
        if missing:
            raise ValueError(f"table {self.name!r} is missing columns {missing}")
        dtypes = _dtypes(self)
        if list(df.columns) == self.names and all(t == d for t, d in zip(df.dtypes, dtypes)):
            return self._conformed_already(df)
        out = {}
        for c, dtype in zip(self.columns, dtypes):
            s = df[c.name]
            if s.dtype == dtype:  # conformed already (a table written after its builder conformed it): keep, cheaply
                out[c.name] = _without_nan(s) if c.dtype == "Float64" else s
            elif c.dtype in ("Float64", "Int64"):
                out[c.name] = _numeric(s, c.dtype)
            elif c.dtype == "boolean":
                out[c.name] = s.astype("boolean")
            else:
                out[c.name] = s.map(lambda v: None if _is_null(v) else str(v), na_action=None).astype("string")
        return pd.DataFrame(out).reset_index(drop=True)


@functools.cache
def _dtypes(schema: TableSchema) -> tuple:
    """The pandas dtype object of each column: compared as objects, since ``"string"`` also equals a string dtype
    whose missing value is NaN, which is not the schema's."""
    import pandas as pd

    return tuple(pd.api.types.pandas_dtype(c.dtype) for c in schema.columns)


@functools.cache
def _empty_frame(schema: TableSchema) -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame({c.name: pd.Series([], dtype=c.dtype) for c in schema.columns})


def _without_nan(s: pd.Series) -> pd.Series:
    """A ``Float64`` column with its NaN and inf (which nullable floats can hold beside null) made null."""
    import numpy as np
    import pandas as pd

    values, null = s.array._data, s.array._mask
    bad = ~np.isfinite(values) & ~null
    if not bad.any():
        return s
    return pd.Series(pd.arrays.FloatingArray(np.where(bad, 0.0, values), null | bad), index=s.index, name=s.name)


def _numeric(s: pd.Series, dtype: str) -> pd.Series:
    """``s`` as ``Float64`` or ``Int64`` (rounded half to even), null where it is not a finite number.

    One pass in numpy over the values' float64 image: tables are conformed column by column, and a
    chain of nullable-pandas operations per column cost more than analyzing a small trace."""
    import numpy as np
    import pandas as pd

    values = pd.to_numeric(s, errors="coerce")
    floats = values.to_numpy(dtype=np.float64, na_value=np.nan) if len(values) else np.zeros(0)
    null = ~np.isfinite(floats)
    if dtype == "Float64":
        return pd.Series(pd.arrays.FloatingArray(np.where(null, 0.0, floats), null), index=s.index)
    rounded = np.round(np.where(null, 0.0, floats))
    if np.any(np.abs(rounded) >= 2.0**63):
        raise ValueError(f"column {s.name!r}: a value beyond the int64 range cannot be an Int64")
    return pd.Series(pd.arrays.IntegerArray(rounded.astype(np.int64), null), index=s.index)


def _is_null(v) -> bool:
    import numpy as np
    import pandas as pd

    if v is None or v is pd.NA:
        return True
    return isinstance(v, float) and not np.isfinite(v)


def columns_of(*specs: tuple[str, str, str, str] | Column) -> tuple[Column, ...]:
    return tuple(s if isinstance(s, Column) else Column(*s) for s in specs)
