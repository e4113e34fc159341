"""The MTEB adapter: start-up hook, ``ModelMeta`` entries, the lazy-fitting encoder, the
offline tasks and the result-folder housekeeping.

``hook`` imports only the standard library; importing this package imports nothing else.
"""
