"""Attach an L3 storage tier to a HiCache tree (``HiCacheController.attach_storage_backend``):
the page store of ``--hicache-storage-backend`` and the prefetch termination policy of
``--hicache-storage-prefetch-policy`` with the extra-config knobs."""

from __future__ import annotations

from policies.hicache_prefetch import make_prefetch_policy
from simulator.radix.hicache_prefetch_tree import StorageController
from simulator.radix.hicache_storage import PageStore, StorageParams


def attach_storage(tree, cfg) -> StorageController:
    """Build the store and controller for ``cfg`` (a ``HiCacheReplayConfig``-like object with
    the storage fields) and attach it to ``tree``; bytes per page come from the geometry."""
    per_layer = 2 * cfg.head_dim * cfg.head_num * cfg.dtype_bytes
    params = StorageParams(
        backend=cfg.storage_backend,
        capacity_bytes=cfg.storage_capacity_bytes,
        read_gbps=cfg.storage_read_gbps,
        write_gbps=cfg.storage_write_gbps,
        op_latency_s=cfg.storage_op_latency_s,
        kv_page_bytes=cfg.page_size * per_layer * cfg.full_layers,
        swa_page_bytes=cfg.page_size * per_layer * (cfg.layers - cfg.full_layers),
    )
    policy = make_prefetch_policy(
        cfg.prefetch_policy,
        timeout_base_s=cfg.prefetch_timeout_base,
        per_ki_token_s=cfg.prefetch_timeout_per_ki_token,
    )
    controller = StorageController(tree, PageStore(params), policy, cfg.prefetch_threshold)
    tree.storage = controller
    return controller
