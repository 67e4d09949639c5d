"""The log's upkeep, a service of its own: the debugging index, the archive and the hot
log's trimming (`service.py`), away from the api, which answers users."""
