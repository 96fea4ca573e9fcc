"""The 0.5.23 oracle driver (``drive_swa_radix.py``) with the allocator's free page ids added
to every size snapshot it records. Runs in the oracle venv; takes the driver's own flags."""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.environ["KVPLAN_ORACLE_DIR"])
import drive_swa_radix as driver  # noqa: E402

_sizes = driver.sizes


def sizes_with_pages(cache, allocator) -> dict:
    out = _sizes(cache, allocator)
    out["full_free_ids"] = allocator.full_attn_allocator.get_all_free_pages().tolist()
    out["swa_free_ids"] = allocator.swa_attn_allocator.get_all_free_pages().tolist()
    return out


driver.sizes = sizes_with_pages

if __name__ == "__main__":
    json.dump(driver.main(driver.parse_args(sys.argv[1:])), sys.stdout)
