"""Families as frozen JAX-pytree dataclasses, each entered in its registry under its SPEC name.

Laws, draft laws and drafters are small frozen dataclasses. Fields declared
with :func:`data_field` are array leaves; the others are static metadata (a
change recompiles a jitted driver). Each class is entered in a registry
(``dict`` name -> class) that the SPEC parser reads.
"""

from __future__ import annotations

import dataclasses

import jax


def data_field(**kw):
    """A dataclass field that is a JAX array leaf (the others are static metadata)."""
    return dataclasses.field(metadata={"data": True}, **kw)


def registrar(registry: dict[str, type]):
    """Decorator factory: ``@register("name")`` makes a class a frozen pytree dataclass in ``registry``."""

    def register(family: str):
        def wrap(cls):
            cls = dataclasses.dataclass(frozen=True, eq=False)(cls)
            data = [f.name for f in dataclasses.fields(cls) if f.metadata.get("data")]
            meta = [f.name for f in dataclasses.fields(cls) if not f.metadata.get("data")]
            jax.tree_util.register_dataclass(cls, data_fields=data, meta_fields=meta)
            cls.family = family
            registry[family] = cls
            return cls

        return wrap

    return register
