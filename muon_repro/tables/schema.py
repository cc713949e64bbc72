"""A table's declaration: its columns (name, pandas dtype, unit, meaning) and how a frame is made
to fit them (:meth:`TableSchema.conform`). Unknown values are nulls (pandas nullable dtypes), never
NaN. pandas, numpy and pyarrow are imported by the methods that use them, so declaring is free."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd


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

    def arrow_schema(self):
        import pyarrow as pa

        types = {"string": pa.string(), "Int64": pa.int64(), "Float64": pa.float64(), "boolean": pa.bool_()}
        fields = [
            pa.field(c.name, types[c.dtype], nullable=True, metadata={"unit": c.unit, "description": c.description})
            for c in self.columns
        ]
        return pa.schema(fields, metadata={"table": self.name, "description": self.description})

    def empty(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame({c.name: pd.Series([], dtype=c.dtype) for c in self.columns})

    def conform(self, df: pd.DataFrame) -> pd.DataFrame:
        """Exactly the schema's columns, in order, with its dtypes; NaN and inf become null."""
        import numpy as np
        import pandas as pd

        missing = [c for c in self.names if c not in df.columns]
        if missing:
            raise ValueError(f"table {self.name!r} is missing columns {missing}")
        out = {}
        for c in self.columns:
            s = df[c.name]
            if c.dtype in ("Float64", "Int64"):
                values = pd.to_numeric(s, errors="coerce").astype("Float64")
                values = values.mask(~np.isfinite(values.fillna(0.0).astype(float)))
                if c.dtype == "Int64":
                    values = values.round().astype("Int64")
                out[c.name] = values
            elif c.dtype == "boolean":
                out[c.name] = s.astype("boolean")
            else:
                out[c.name] = s.map(lambda v: None if _is_null(v) else str(v), na_action=None).astype("string")
        return pd.DataFrame(out).reset_index(drop=True)


def _is_null(v) -> bool:
    import numpy as np
    import pandas as pd

    if v is None or v is pd.NA:
        return True
    return isinstance(v, float) and not np.isfinite(v)


def columns_of(*specs: tuple[str, str, str, str] | Column) -> tuple[Column, ...]:
    return tuple(s if isinstance(s, Column) else Column(*s) for s in specs)
