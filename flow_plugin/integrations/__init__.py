"""Thin adapters from the library to evaluation frameworks (MTEB, SentEval)."""
