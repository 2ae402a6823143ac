"""SGT: scalable sparse graph transformers (Spexphormer's two-stage method) as a library of plain stages."""

__version__ = "0.1.0"
