"""Catalog: what can be evaluated. Backbones from ``registry/*.toml``, the model names they
expand to, offline weights shipped in packages, and the task names."""
