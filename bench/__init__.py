"""Bench: end-to-end profile x speculation matrix, all-reduce microbench, trace analysis, cost model."""

from typing import Any

JsonObject = dict[str, Any]  # a JSON object as another program sent it (SGLang, the control API) or as written out
