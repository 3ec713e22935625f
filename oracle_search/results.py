"""Kept for imports written before `oracle_search.schema` held the results table."""
from oracle_search.schema import (COLUMNS, atomic_write_bytes, atomic_write_json, read_results,  # noqa: F401
                                  results_frame, write_results)
