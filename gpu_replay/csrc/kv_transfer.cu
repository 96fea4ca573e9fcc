// KV page movers between pinned host pools and device pools (issue 13), built with nvcc on the
// GPU machine and called through ctypes (gpu_replay/cuda_build.py); no torch headers, so the
// library builds in seconds and works with whichever torch the machine has.
//
// 1. kvt_rows: SM copy of token rows by index lists (what SGLang's "kernel" io backend does in
//    sglang/kernels/ops/kvcache/hicache.py): one warp per chunk of G tokens of one (component,
//    layer) slot, 16-byte accesses, every lane issuing all of its UNROLL loads before any store so
//    that UNROLL x 16 B per lane are in flight; optional streaming (.cs) cache hints.
// 2. kvt_bulk: page-granular bulk-async (TMA 1D) copies through a shared-memory ring: one thread
//    per block keeps `stages` cp.async.bulk loads in flight and drains each stage with a
//    cp.async.bulk store (the idea of sgl-kernel's hicache TMA path, written from the PTX ISA).
// 3. kvt_ce_pages / kvt_ce_pitched: copy-engine page copies issued from C++ (one
//    cudaMemcpyAsync each, or one cudaMemcpyBatchAsync), adjacent pages merged; SGLang's direct
//    backend (sgl-kernel/csrc/kvcacheio/transfer.cu, transfer_kv_direct) issues the same copies.
// 4. kvt_ce_3d: copy-engine copies of whole page runs across layers and components, one
//    cudaMemcpy3DBatchAsync op each (width = the run's bytes, height = layers, depth = K and V),
//    so one driver op moves what the per-page copies of (3) need 2 x layers ops for.
// 5. kvt_ce_layers_*: a request's per-layer loads by the copy engines, issued by background
//    threads with an event per layer, so the caller's compute launches are not delayed.
// 6. kvt_graph_*: the page copies as the memcpy nodes of an instantiated CUDA graph, addresses
//    rewritten per transfer, one launch.
// 7. kvt_layers: a request's load of every layer in ONE launch of a few persistent blocks (the
//    bulk-async ring of (2), items in layer order, one counter per layer bumped by each block once
//    its share of that layer has landed), so the loads hold a few SMs for the whole request
//    instead of asking for SM slots once per layer behind the attention's blocks.
//
// Every entry point returns 0 or a cudaError_t / negative argument code; addresses are byte
// addresses (device pointers, or host pointers of registered memory under unified addressing).

#include <cuda_runtime.h>
#include <stdint.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <numeric>
#include <thread>
#include <unordered_map>
#include <vector>

namespace {

constexpr int kBadArgs = -1;

struct RowsArgs {
  const int64_t* src_bases;  // [n_slots] byte addresses (device table)
  const int64_t* dst_bases;
  const int64_t* src_idx;  // [n_tok] token slots (device)
  const int64_t* dst_idx;
  int64_t n_tok;
  int n_slots;
  int page;
  int rvec;  // 16-byte vectors per row
  int64_t sps, sts, dps, dts;  // page / token strides, bytes
  int pdl;  // launched with programmatic stream serialization (see pdl_begin / pdl_end)
};

// Programmatic dependent launch (Hopper): a copy kernel lets the next kernel of its stream start
// at once (its loads are issued while this one's last bytes drain), and waits for the kernel
// before it to complete before it exits, so kernels still complete in stream order (an event
// after layer i's copy still means layers <= i are done). Only for streams whose earlier kernels
// touch none of the copied rows (a load stream): the copy may start before they finish.
__device__ __forceinline__ void pdl_begin(int pdl) {
  if (pdl) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

__device__ __forceinline__ void pdl_end(int pdl) {
  if (pdl) asm volatile("griddepcontrol.wait;" ::: "memory");
}

template <typename Kernel, typename Args>
cudaError_t launch(Kernel k, int grid, int block, size_t smem, cudaStream_t s, bool pdl, Args a) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(block);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, k, a);
}

template <bool kStream>
__device__ __forceinline__ uint4 load16(const uint4* p) {
  if constexpr (kStream) return __ldcs(p);
  return *p;
}

template <bool kStream>
__device__ __forceinline__ void store16(uint4* p, uint4 v) {
  if constexpr (kStream)
    __stcs(p, v);
  else
    *p = v;
}

template <int kUnroll, bool kStream>
__global__ void rows_kernel(RowsArgs a) {
  pdl_begin(a.pdl);
  const int lane = threadIdx.x & 31;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int64_t n_warps = (static_cast<int64_t>(gridDim.x) * blockDim.x) >> 5;
  const int tok_per_item = max(1, (32 * kUnroll) / a.rvec);
  const int64_t chunks = (a.n_tok + tok_per_item - 1) / tok_per_item;
  const int64_t items = chunks * a.n_slots;
  for (int64_t it = warp; it < items; it += n_warps) {
    const int slot = static_cast<int>(it / chunks);
    const int64_t t0 = (it - static_cast<int64_t>(slot) * chunks) * tok_per_item;
    const int64_t nt = min(static_cast<int64_t>(tok_per_item), a.n_tok - t0);
    const int nv = static_cast<int>(nt) * a.rvec;
    const char* sb = reinterpret_cast<const char*>(a.src_bases[slot]);
    char* db = reinterpret_cast<char*>(a.dst_bases[slot]);
    uint4 r[kUnroll];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      const int j = lane + 32 * k;
      if (j < nv) {
        const int t = j / a.rvec, c = j - t * a.rvec;
        const int64_t s = a.src_idx[t0 + t];
        const char* p = sb + (s / a.page) * a.sps + (s % a.page) * a.sts + c * 16;
        r[k] = load16<kStream>(reinterpret_cast<const uint4*>(p));
      }
    }
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      const int j = lane + 32 * k;
      if (j < nv) {
        const int t = j / a.rvec, c = j - t * a.rvec;
        const int64_t d = a.dst_idx[t0 + t];
        char* p = db + (d / a.page) * a.dps + (d % a.page) * a.dts + c * 16;
        store16<kStream>(reinterpret_cast<uint4*>(p), r[k]);
      }
    }
  }
  pdl_end(a.pdl);
}

// ---- bulk-async (TMA 1D) ring ----

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint32_t bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
}

__device__ __forceinline__ void mbar_expect(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n\t.reg .pred P1;\n\tWAIT_%=:\n\t"
      "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n\t"
      "@P1 bra.uni DONE_%=;\n\tbra.uni WAIT_%=;\n\tDONE_%=:\n\t}" ::"r"(bar),
      "r"(parity)
      : "memory");
}

__device__ __forceinline__ void bulk_load(uint32_t dst_smem, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst_smem),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
}

__device__ __forceinline__ void bulk_store(void* dst, uint32_t src_smem, uint32_t bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst), "r"(src_smem), "r"(bytes)
               : "memory");
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

constexpr int kMaxStages = 16;

struct BulkArgs {
  const int64_t* src_bases;
  const int64_t* dst_bases;
  const int64_t* src_idx;  // token slots; page p of the transfer starts at idx[p * page]
  const int64_t* dst_idx;
  int64_t n_pages;
  int n_slots;
  int page;
  int64_t sps, dps;  // page strides, bytes
  uint32_t chunk;  // bytes per bulk op (divides page_bytes)
  int chunks_per_page;
  int stages;
  int pdl;
};

__device__ __forceinline__ void bulk_item(const BulkArgs& a, int64_t it, const char** src, char** dst) {
  const int64_t per_slot = a.n_pages * a.chunks_per_page;
  const int slot = static_cast<int>(it / per_slot);
  const int64_t rem = it - slot * per_slot;
  const int64_t p = rem / a.chunks_per_page;
  const int64_t c = rem - p * a.chunks_per_page;
  const int64_t sp = a.src_idx[p * a.page] / a.page, dp = a.dst_idx[p * a.page] / a.page;
  *src = reinterpret_cast<const char*>(a.src_bases[slot]) + sp * a.sps + c * a.chunk;
  *dst = reinterpret_cast<char*>(a.dst_bases[slot]) + dp * a.dps + c * a.chunk;
}

__global__ void bulk_kernel(BulkArgs a) {
  extern __shared__ __align__(128) unsigned char ring[];
  __shared__ __align__(8) uint64_t bars[kMaxStages];
  pdl_begin(a.pdl);
  if (threadIdx.x != 0) return;
  const int64_t items = a.n_pages * a.chunks_per_page * a.n_slots;
  if (blockIdx.x >= items) {
    pdl_end(a.pdl);
    return;
  }
  const int64_t mine = (items - blockIdx.x + gridDim.x - 1) / gridDim.x;
  for (int s = 0; s < a.stages; ++s) mbar_init(smem_addr(&bars[s]));
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  auto issue = [&](int64_t k) {
    const int s = static_cast<int>(k % a.stages);
    const char* src;
    char* dst;
    bulk_item(a, blockIdx.x + k * gridDim.x, &src, &dst);
    const uint32_t bar = smem_addr(&bars[s]);
    mbar_expect(bar, a.chunk);
    bulk_load(smem_addr(ring + static_cast<size_t>(s) * a.chunk), src, a.chunk, bar);
  };
  const int64_t pro = min(static_cast<int64_t>(a.stages), mine);
  for (int64_t k = 0; k < pro; ++k) issue(k);
  for (int64_t k = 0; k < mine; ++k) {
    const int s = static_cast<int>(k % a.stages);
    mbar_wait(smem_addr(&bars[s]), static_cast<uint32_t>((k / a.stages) & 1));
    const char* src;
    char* dst;
    bulk_item(a, blockIdx.x + k * gridDim.x, &src, &dst);
    bulk_store(dst, smem_addr(ring + static_cast<size_t>(s) * a.chunk), a.chunk);
    // Refill the stage the previous store drained once that store has read it (one store may
    // still be reading), so stages-1 loads stay in flight behind the store.
    if (k >= 1 && k - 1 + a.stages < mine) {
      asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
      issue(k - 1 + a.stages);
    }
  }
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  pdl_end(a.pdl);
}

// ---- copy-engine issue ----

struct Copies {
  std::vector<void*> dst;
  std::vector<const void*> src;
  std::vector<size_t> size;
};

// Runs of pages adjacent on both sides (when a side's pages are page_bytes apart), as [start, end).
std::vector<std::pair<int64_t, int64_t>> page_runs(const int64_t* sp, const int64_t* dp, int64_t n, bool merge) {
  std::vector<std::pair<int64_t, int64_t>> runs;
  int64_t start = 0;
  for (int64_t i = 1; i <= n; ++i) {
    const bool cont = merge && i < n && sp[i] == sp[i - 1] + 1 && dp[i] == dp[i - 1] + 1;
    if (!cont) {
      runs.emplace_back(start, i);
      start = i;
    }
  }
  return runs;
}

// Attributes of every cudaMemcpyBatchAsync (kvt_set_batch_attr; a measurement knob, default 0):
// bit 0 drops cudaMemcpyFlagPreferOverlapWithCompute, bit 1 sets cudaMemcpySrcAccessOrderAny (the
// source may be read out of stream order: valid only where nothing earlier in the stream writes it,
// such as a host pool being loaded).
std::atomic<int> g_batch_attr{0};

int issue_range(const Copies& c, size_t lo, size_t hi, int batch, cudaStream_t stream) {
  if (lo >= hi) return 0;
#if CUDART_VERSION >= 13000
  if (batch) {
    const int knob = g_batch_attr.load(std::memory_order_relaxed);
    cudaMemcpyAttributes attr = {};
    attr.srcAccessOrder = (knob & 2) ? cudaMemcpySrcAccessOrderAny : cudaMemcpySrcAccessOrderStream;
    attr.flags = (knob & 1) ? 0 : cudaMemcpyFlagPreferOverlapWithCompute;
    size_t idx = 0;
    return static_cast<int>(cudaMemcpyBatchAsync(const_cast<void* const*>(c.dst.data() + lo), c.src.data() + lo,
                                                 c.size.data() + lo, hi - lo, &attr, &idx, 1, stream));
  }
#else
  if (batch) return static_cast<int>(cudaErrorNotSupported);
#endif
  for (size_t i = lo; i < hi; ++i) {
    cudaError_t rc = cudaMemcpyAsync(c.dst[i], c.src[i], c.size[i], cudaMemcpyDefault, stream);
    if (rc != cudaSuccess) return static_cast<int>(rc);
  }
  return 0;
}

// Copies [lo, hi) on one stream, in batches of at most max_batch (0: one batch), so that the
// copy engines start on the first batch while the driver still takes the next.
int issue_part(const Copies& c, size_t lo, size_t hi, int batch, size_t max_batch, cudaStream_t stream) {
  const size_t step = (batch && max_batch) ? max_batch : (hi - lo);
  for (size_t a = lo; a < hi; a += step) {
    int rc = issue_range(c, a, std::min(hi, a + step), batch, stream);
    if (rc) return rc;
  }
  return 0;
}

// ---- persistent issue threads ----
//
// The driver's cost per copy (0.6-1 us in a batch) exceeds a 32 KiB page's transfer time
// (0.6 us at 55 GB/s), so one issuing thread cannot keep the copy engines busy with scattered
// pages. Threads made per call cost tens of microseconds each (more than a one-layer load of a
// 4k-token prefix is allowed), so the issuing threads live across calls: each spins briefly on
// its own flag after a job (back-to-back per-layer calls find it awake), then sleeps.

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

class IssuePool {
 public:
  static constexpr int kMax = 16;

  // fn(0) runs on the caller, fn(1..n-1) on pool threads; returns when all are done.
  void run(int n, const std::function<void(int)>& fn) {
    n = std::max(1, std::min(n, kMax));
    std::lock_guard<std::mutex> guard(run_mu_);
    while (started_ < n - 1) {
      const int idx = ++started_;
      std::thread([this, idx] { worker(idx); }).detach();
    }
    for (int i = 1; i < n; ++i) {
      slots_[i].job = &fn;
      slots_[i].go.store(1, std::memory_order_release);
    }
    if (n > 1) {
      { std::lock_guard<std::mutex> l(mu_); }
      cv_.notify_all();
    }
    fn(0);
    for (int i = 1; i < n; ++i)
      while (slots_[i].go.load(std::memory_order_acquire) != 0) cpu_relax();
  }

 private:
  struct Slot {
    std::atomic<int> go{0};
    const std::function<void(int)>* job = nullptr;
  };

  void worker(int idx) {
    Slot& s = slots_[idx];
    for (;;) {
      for (int spin = 0; s.go.load(std::memory_order_acquire) == 0; ++spin) {
        if (spin < 20000) {
          cpu_relax();
          continue;
        }
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] { return s.go.load(std::memory_order_acquire) != 0; });
      }
      (*s.job)(idx);
      s.go.store(0, std::memory_order_release);
    }
  }

  std::mutex run_mu_, mu_;
  std::condition_variable cv_;
  int started_ = 0;
  Slot slots_[kMax];
};

IssuePool& issue_pool() {
  static IssuePool* pool = new IssuePool();  // never destroyed: its threads outlive main's statics
  return *pool;
}

// Splits the copies over n_streams streams, each issued by its own (persistent) host thread.
int issue(const Copies& c, int batch, size_t max_batch, int n_streams, void* const* streams) {
  const size_t n = c.size.size();
  if (n == 0) return 0;
  if (n_streams <= 1) return issue_part(c, 0, n, batch, max_batch, static_cast<cudaStream_t>(streams[0]));
  int device = 0;
  cudaGetDevice(&device);
  std::vector<int> rcs(n_streams, 0);
  issue_pool().run(n_streams, [&](int t) {
    if (t) cudaSetDevice(device);
    rcs[t] = issue_part(c, n * t / n_streams, n * (t + 1) / n_streams, batch, max_batch,
                        static_cast<cudaStream_t>(streams[t]));
  });
  for (int rc : rcs)
    if (rc) return rc;
  return 0;
}

// One event per stream, made on first use and kept (fan-out / fan-in of side streams).
cudaEvent_t stream_event(void* stream) {
  static std::mutex mu;
  static auto* events = new std::unordered_map<void*, cudaEvent_t>();
  std::lock_guard<std::mutex> l(mu);
  auto it = events->find(stream);
  if (it != events->end()) return it->second;
  cudaEvent_t e = nullptr;
  if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) return nullptr;
  (*events)[stream] = e;
  return e;
}

// Order of the page pairs: 0 as given, 1 by source page, 2 by destination page (stable).
void sort_pages(const int64_t* sp, const int64_t* dp, int64_t n, int key, std::vector<int64_t>* s,
                std::vector<int64_t>* d) {
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  const int64_t* k = key == 2 ? dp : sp;
  if (key) std::stable_sort(order.begin(), order.end(), [k](int64_t a, int64_t b) { return k[a] < k[b]; });
  s->resize(n);
  d->resize(n);
  for (int64_t i = 0; i < n; ++i) {
    (*s)[i] = sp[order[i]];
    (*d)[i] = dp[order[i]];
  }
}

__global__ void sleep_kernel(int64_t ns) {
  uint64_t t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (static_cast<int64_t>(t - t0) < ns);
}

// ---- 3D batch ops (one op per page run: rows = layers, slices = components) ----

struct Side3D {
  int64_t base;  // byte address of the first (component, layer) slot
  int64_t row;  // bytes between layers (0: tightly packed)
  int64_t layer_h;  // rows between components (0: tightly packed)
};

#if CUDART_VERSION >= 12080
cudaMemcpy3DOperand operand3d(int64_t addr, const Side3D& s) {
  cudaMemcpy3DOperand o = {};
  o.type = cudaMemcpyOperandTypePointer;
  o.op.ptr.ptr = reinterpret_cast<void*>(addr);
  o.op.ptr.rowLength = static_cast<size_t>(s.row);
  o.op.ptr.layerHeight = static_cast<size_t>(s.layer_h);
  return o;
}

int batch3d(cudaMemcpy3DBatchOp* ops, size_t n, cudaStream_t stream) {
#if CUDART_VERSION >= 13000
  return static_cast<int>(cudaMemcpy3DBatchAsync(n, ops, 0, stream));
#else
  size_t fail = 0;
  return static_cast<int>(cudaMemcpy3DBatchAsync(n, ops, &fail, 0, stream));
#endif
}
#endif

// ---- background per-layer loads (kvt_ce_layers_*) ----
//
// A request's load of every layer, issued by persistent background threads (one per side
// stream, each with its share of the pages for every layer, in layer order) while the caller
// goes on launching compute: the host's issue cost then delays neither the compute's launch nor
// the engines (SGLang issues the per-layer loads from the scheduler thread before the forward,
// whose layer i waits for load i: HiCacheController's LayerDoneCounter).

class AsyncIssuer {
 public:
  static constexpr int kMax = 8;

  void submit(int t, std::function<void()> job) {
    std::lock_guard<std::mutex> guard(start_mu_);
    while (started_ <= t) {
      const int idx = started_++;
      std::thread([this, idx] { worker(idx); }).detach();
    }
    slots_[t].job = std::move(job);
    slots_[t].go.store(1, std::memory_order_release);
    { std::lock_guard<std::mutex> l(mu_); }
    cv_.notify_all();
  }

  void join(int t) {
    while (slots_[t].go.load(std::memory_order_acquire) != 0) cpu_relax();
  }

 private:
  struct Slot {
    std::atomic<int> go{0};
    std::function<void()> job;
  };

  void worker(int idx) {
    Slot& s = slots_[idx];
    for (;;) {
      for (int spin = 0; s.go.load(std::memory_order_acquire) == 0; ++spin) {
        if (spin < 20000) {
          cpu_relax();
          continue;
        }
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] { return s.go.load(std::memory_order_acquire) != 0; });
      }
      s.job();
      s.job = nullptr;
      s.go.store(0, std::memory_order_release);
    }
  }

  std::mutex start_mu_, mu_;
  std::condition_variable cv_;
  int started_ = 0;
  Slot slots_[kMax];
};

AsyncIssuer& async_issuer() {
  static AsyncIssuer* issuer = new AsyncIssuer();
  return *issuer;
}

// Events without timing, kept for reuse across jobs.
std::mutex event_mu;
std::vector<cudaEvent_t>* free_events = new std::vector<cudaEvent_t>();

cudaEvent_t take_event() {
  {
    std::lock_guard<std::mutex> l(event_mu);
    if (!free_events->empty()) {
      cudaEvent_t e = free_events->back();
      free_events->pop_back();
      return e;
    }
  }
  cudaEvent_t e = nullptr;
  cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
  return e;
}

struct LayerJob {
  std::vector<int64_t> src_bases, dst_bases;  // [component][layer]
  std::vector<int64_t> sp, dp;
  int n_comp = 0, n_layers = 0, n_streams = 0, merge = 0, batch = 1, max_batch = 0, device = 0;
  int64_t sps = 0, dps = 0, page_bytes = 0;
  std::vector<void*> streams;
  std::vector<cudaEvent_t> events;  // [layer][stream]
  std::unique_ptr<std::atomic<int>[]> done;  // per layer: streams whose copies are issued
  std::atomic<int> rc{0};

  // Thread t: its share of the pages, layer after layer, an event after each layer.
  void run(int t) {
    cudaSetDevice(device);
    const int64_t n = static_cast<int64_t>(sp.size());
    const int64_t lo = n * t / n_streams, hi = n * (t + 1) / n_streams;
    const auto runs = page_runs(sp.data() + lo, dp.data() + lo, hi - lo, merge && sps == page_bytes && dps == page_bytes);
    auto s = static_cast<cudaStream_t>(streams[t]);
    for (int l = 0; l < n_layers; ++l) {
      Copies c;
      for (int i = 0; i < n_comp; ++i)
        for (const auto& r : runs) {
          c.src.push_back(reinterpret_cast<const void*>(src_bases[i * n_layers + l] + sp[lo + r.first] * sps));
          c.dst.push_back(reinterpret_cast<void*>(dst_bases[i * n_layers + l] + dp[lo + r.first] * dps));
          c.size.push_back(static_cast<size_t>((r.second - r.first) * page_bytes));
        }
      int err = rc.load() ? 0 : issue_part(c, 0, c.size.size(), batch, static_cast<size_t>(max_batch), s);
      if (!err) err = static_cast<int>(cudaEventRecord(events[l * n_streams + t], s));
      if (err) rc.store(err);
      done[l].fetch_add(1, std::memory_order_acq_rel);
    }
  }
};

}  // namespace

extern "C" {

int kvt_version() { return 11; }

int kvt_set_batch_attr(int knob) {
  if (knob < 0 || knob > 3) return kBadArgs;
  g_batch_attr.store(knob);
  return 0;
}

// flags: bit 0 streaming (.cs) cache hints, bit 1 programmatic dependent launch.
int kvt_rows(const int64_t* src_bases, const int64_t* dst_bases, int n_slots, const int64_t* src_idx,
             const int64_t* dst_idx, int64_t n_tok, int64_t sps, int64_t sts, int64_t dps, int64_t dts, int page,
             int row_bytes, int grid, int block, int unroll, int flags, void* stream) {
  if (row_bytes % 16 || row_bytes <= 0 || block % 32 || grid <= 0 || n_slots <= 0) return kBadArgs;
  if (n_tok == 0) return 0;
  const bool streaming = flags & 1, pdl = flags & 2;
  RowsArgs a{src_bases, dst_bases, src_idx, dst_idx, n_tok, n_slots, page, row_bytes / 16, sps, sts, dps, dts, pdl};
  if (a.rvec > 32 * unroll) return kBadArgs;
  auto s = static_cast<cudaStream_t>(stream);
  cudaError_t rc;
  if (unroll == 4 && streaming)
    rc = launch(rows_kernel<4, true>, grid, block, 0, s, pdl, a);
  else if (unroll == 4)
    rc = launch(rows_kernel<4, false>, grid, block, 0, s, pdl, a);
  else if (unroll == 8 && streaming)
    rc = launch(rows_kernel<8, true>, grid, block, 0, s, pdl, a);
  else if (unroll == 8)
    rc = launch(rows_kernel<8, false>, grid, block, 0, s, pdl, a);
  else if (unroll == 16 && streaming)
    rc = launch(rows_kernel<16, true>, grid, block, 0, s, pdl, a);
  else if (unroll == 16)
    rc = launch(rows_kernel<16, false>, grid, block, 0, s, pdl, a);
  else
    return kBadArgs;
  return static_cast<int>(rc);
}

int kvt_bulk(const int64_t* src_bases, const int64_t* dst_bases, int n_slots, const int64_t* src_idx,
             const int64_t* dst_idx, int64_t n_pages, int64_t sps, int64_t dps, int page, int64_t page_bytes,
             int chunk, int stages, int grid, void* stream, int pdl) {
  if (chunk <= 0 || chunk % 16 || page_bytes % chunk || stages < 2 || stages > kMaxStages || grid <= 0)
    return kBadArgs;
  if (n_pages == 0) return 0;
  const size_t smem = static_cast<size_t>(chunk) * stages;
  static size_t smem_allowed = 48 << 10;  // raised once per larger ring
  if (smem > smem_allowed) {
    cudaError_t rc =
        cudaFuncSetAttribute(bulk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (rc != cudaSuccess) return static_cast<int>(rc);
    smem_allowed = smem;
  }
  BulkArgs a{src_bases, dst_bases, src_idx, dst_idx, n_pages, n_slots, page, sps, dps,
             static_cast<uint32_t>(chunk), static_cast<int>(page_bytes / chunk), stages, pdl};
  return static_cast<int>(launch(bulk_kernel, grid, 32, smem, static_cast<cudaStream_t>(stream), pdl != 0, a));
}

// One copy per (slot, run of pages adjacent on both sides): slot i moves from src_bases[i] +
// src_page * sps to dst_bases[i] + dst_page * dps, page_bytes per page (host arrays); issued on
// n_streams streams from as many host threads, batches of at most max_batch copies.
int kvt_ce_pages(const int64_t* src_bases, const int64_t* dst_bases, int n_slots, const int64_t* src_pages,
                 const int64_t* dst_pages, int64_t n_pages, int64_t sps, int64_t dps, int64_t page_bytes, int merge,
                 int batch, int max_batch, int n_streams, void* const* streams) {
  const bool can_merge = merge && sps == page_bytes && dps == page_bytes;
  const auto runs = page_runs(src_pages, dst_pages, n_pages, can_merge);
  Copies c;
  c.dst.reserve(runs.size() * n_slots);
  c.src.reserve(runs.size() * n_slots);
  c.size.reserve(runs.size() * n_slots);
  for (int i = 0; i < n_slots; ++i)
    for (const auto& r : runs) {
      c.src.push_back(reinterpret_cast<const void*>(src_bases[i] + src_pages[r.first] * sps));
      c.dst.push_back(reinterpret_cast<void*>(dst_bases[i] + dst_pages[r.first] * dps));
      c.size.push_back(static_cast<size_t>((r.second - r.first) * page_bytes));
    }
  return issue(c, batch, static_cast<size_t>(max_batch), n_streams, streams);
}

// One cudaMemcpy2DAsync per (component, run of pages adjacent on both sides; a page when merge
// is 0 or a side's pages are not page_bytes apart): `height` layers of the run's bytes, layers
// spitch / dpitch bytes apart on each side (a stacked device pool against layer_first or
// page_first_direct host pages).
int kvt_ce_pitched(const int64_t* src_bases, const int64_t* dst_bases, int n_comp, const int64_t* src_pages,
                   const int64_t* dst_pages, int64_t n_pages, int64_t sps, int64_t dps, int64_t page_bytes,
                   int64_t spitch, int64_t dpitch, int height, int merge, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  const auto runs = page_runs(src_pages, dst_pages, n_pages, merge && sps == page_bytes && dps == page_bytes);
  for (int i = 0; i < n_comp; ++i)
    for (const auto& r : runs) {
      const size_t width = static_cast<size_t>((r.second - r.first) * page_bytes);
      void* dst = reinterpret_cast<void*>(dst_bases[i] + dst_pages[r.first] * dps);
      const void* src = reinterpret_cast<const void*>(src_bases[i] + src_pages[r.first] * sps);
      if (height == 1) {  // one layer: a plain copy (the pitches say nothing)
        cudaError_t rc = cudaMemcpyAsync(dst, src, width, cudaMemcpyDefault, s);
        if (rc != cudaSuccess) return static_cast<int>(rc);
        continue;
      }
      if (static_cast<int64_t>(width) > spitch || static_cast<int64_t>(width) > dpitch) return kBadArgs;
      cudaError_t rc = cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, cudaMemcpyDefault, s);
      if (rc != cudaSuccess) return static_cast<int>(rc);
    }
  return 0;
}

// kvt_ce_pages with the stream fan-out done here: the side streams wait for `main` (one event),
// copies are issued by up to n_streams persistent threads (one per side stream), and `main`
// waits for every side stream; `sort` orders the page pairs first (0 none, 1 by source page,
// 2 by destination page) so that adjacent ids merge and each engine walks addresses upwards.
int kvt_ce_fan(const int64_t* src_bases, const int64_t* dst_bases, int n_slots, const int64_t* src_pages,
               const int64_t* dst_pages, int64_t n_pages, int64_t sps, int64_t dps, int64_t page_bytes, int merge,
               int sort, int batch, int max_batch, int n_streams, void* const* streams, void* main) {
  if (n_streams <= 0 || n_streams > IssuePool::kMax || n_pages < 0) return kBadArgs;
  if (n_pages == 0) return 0;
  std::vector<int64_t> sp, dp;
  sort_pages(src_pages, dst_pages, n_pages, sort, &sp, &dp);
  cudaEvent_t start = stream_event(main);
  if (start == nullptr) return static_cast<int>(cudaErrorUnknown);
  cudaError_t rc = cudaEventRecord(start, static_cast<cudaStream_t>(main));
  if (rc != cudaSuccess) return static_cast<int>(rc);
  for (int i = 0; i < n_streams; ++i) {
    rc = cudaStreamWaitEvent(static_cast<cudaStream_t>(streams[i]), start, 0);
    if (rc != cudaSuccess) return static_cast<int>(rc);
  }
  const int out = kvt_ce_pages(src_bases, dst_bases, n_slots, sp.data(), dp.data(), n_pages, sps, dps, page_bytes,
                               merge, batch, max_batch, n_streams, streams);
  for (int i = 0; i < n_streams; ++i) {
    cudaEvent_t done = stream_event(streams[i]);
    if (done == nullptr) return static_cast<int>(cudaErrorUnknown);
    rc = cudaEventRecord(done, static_cast<cudaStream_t>(streams[i]));
    if (rc == cudaSuccess) rc = cudaStreamWaitEvent(static_cast<cudaStream_t>(main), done, 0);
    if (rc != cudaSuccess) return static_cast<int>(rc);
  }
  return out;
}

// One cudaMemcpy3DBatchAsync op per entry i: width[i] bytes from src.base + src_off[i] to
// dst.base + dst_off[i], `height` rows (layers) `row` bytes apart on each side, `depth` slices
// (components) row x layer_h bytes apart. The ops are split over n_streams side streams (each
// issued by its own persistent thread, in batches of at most max_batch ops; fan-out / fan-in
// with `main` as kvt_ce_fan), or issued on `main` itself when n_streams is 0. flags: bit 0
// cudaMemcpyFlagPreferOverlapWithCompute, bit 2 pass packed (0) rows / layer heights as 0.
int kvt_ce_3d(int64_t src_base, int64_t src_row, int64_t src_layer_h, int64_t dst_base, int64_t dst_row,
              int64_t dst_layer_h, const int64_t* src_off, const int64_t* dst_off, const int64_t* width,
              int64_t n_ops, int height, int depth, int flags, int max_batch, int n_streams, void* const* streams,
              void* main) {
#if CUDART_VERSION >= 12080
  if (n_ops < 0 || height <= 0 || depth <= 0 || n_streams < 0 || n_streams > IssuePool::kMax || max_batch < 0)
    return kBadArgs;
  if (n_ops == 0) return 0;
  const Side3D src{src_base, src_row, src_layer_h}, dst{dst_base, dst_row, dst_layer_h};
  std::vector<cudaMemcpy3DBatchOp> ops(static_cast<size_t>(n_ops));
  for (int64_t i = 0; i < n_ops; ++i) {
    if ((src_row && width[i] > src_row) || (dst_row && width[i] > dst_row)) return kBadArgs;
    cudaMemcpy3DBatchOp& op = ops[i];
    op = {};
    // Packed sides (0) are given explicitly (the op's width, its height) unless flags bit 2 asks
    // for the zeros the API documents as "tightly packed".
    const bool raw = flags & 4;
    const Side3D s{src.base, src.row || raw ? src.row : width[i], src.layer_h || raw ? src.layer_h : height};
    const Side3D d{dst.base, dst.row || raw ? dst.row : width[i], dst.layer_h || raw ? dst.layer_h : height};
    op.src = operand3d(src_base + src_off[i], s);
    op.dst = operand3d(dst_base + dst_off[i], d);
    op.extent = make_cudaExtent(static_cast<size_t>(width[i]), static_cast<size_t>(height),
                                static_cast<size_t>(depth));
    op.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    op.flags = (flags & 1) ? cudaMemcpyFlagPreferOverlapWithCompute : 0;
  }
  auto run = [&](size_t lo, size_t hi, cudaStream_t s) -> int {
    const size_t step = max_batch > 0 ? static_cast<size_t>(max_batch) : (hi - lo);
    for (size_t a = lo; a < hi; a += step) {
      const int rc = batch3d(ops.data() + a, std::min(hi, a + step) - a, s);
      if (rc) return rc;
    }
    return 0;
  };
  const size_t n = ops.size();
  if (n_streams == 0) return run(0, n, static_cast<cudaStream_t>(main));
  cudaEvent_t start = stream_event(main);
  if (start == nullptr) return static_cast<int>(cudaErrorUnknown);
  cudaError_t rc = cudaEventRecord(start, static_cast<cudaStream_t>(main));
  for (int i = 0; i < n_streams && rc == cudaSuccess; ++i)
    rc = cudaStreamWaitEvent(static_cast<cudaStream_t>(streams[i]), start, 0);
  if (rc != cudaSuccess) return static_cast<int>(rc);
  std::vector<int> rcs(n_streams, 0);
  if (n_streams == 1) {
    rcs[0] = run(0, n, static_cast<cudaStream_t>(streams[0]));
  } else {
    int device = 0;
    cudaGetDevice(&device);
    issue_pool().run(n_streams, [&](int t) {
      if (t) cudaSetDevice(device);
      rcs[t] = run(n * t / n_streams, n * (t + 1) / n_streams, static_cast<cudaStream_t>(streams[t]));
    });
  }
  for (int i = 0; i < n_streams; ++i) {
    cudaEvent_t done = stream_event(streams[i]);
    if (done == nullptr) return static_cast<int>(cudaErrorUnknown);
    rc = cudaEventRecord(done, static_cast<cudaStream_t>(streams[i]));
    if (rc == cudaSuccess) rc = cudaStreamWaitEvent(static_cast<cudaStream_t>(main), done, 0);
    if (rc != cudaSuccess) return static_cast<int>(rc);
  }
  for (int r : rcs)
    if (r) return r;
  return 0;
#else
  return static_cast<int>(cudaErrorNotSupported);
#endif
}

// Starts a request's load of n_layers layers (slot bases [component][layer]; pages as in
// kvt_ce_pages, sorted by `sort` as in kvt_ce_fan) on n_streams side streams, issued by
// background threads; returns at once with *job set. The side streams first wait for the work
// queued on `main` so far. Then kvt_ce_layers_wait(job, l, stream) makes `stream` wait for
// layer l (blocking the caller until layer l's copies are issued), and kvt_ce_layers_finish(job)
// joins the threads and frees the job (required before the next start). flags: bit 0 one
// cudaMemcpyAsync per copy instead of batches, bit 1 no wait for `main`.
int kvt_ce_layers_start(const int64_t* src_bases, const int64_t* dst_bases, int n_comp, int n_layers,
                        const int64_t* src_pages, const int64_t* dst_pages, int64_t n_pages, int64_t sps,
                        int64_t dps, int64_t page_bytes, int merge, int sort, int max_batch, int n_streams,
                        void* const* streams, void* main, int flags, void** job_out) {
  if (n_streams <= 0 || n_streams > AsyncIssuer::kMax || n_layers <= 0 || n_comp <= 0 || n_pages < 0)
    return kBadArgs;
  auto* job = new LayerJob();
  job->src_bases.assign(src_bases, src_bases + n_comp * n_layers);
  job->dst_bases.assign(dst_bases, dst_bases + n_comp * n_layers);
  sort_pages(src_pages, dst_pages, n_pages, sort, &job->sp, &job->dp);
  job->n_comp = n_comp;
  job->n_layers = n_layers;
  job->n_streams = n_streams;
  job->merge = merge;
  job->batch = (flags & 1) ? 0 : 1;
  job->max_batch = max_batch;
  job->sps = sps;
  job->dps = dps;
  job->page_bytes = page_bytes;
  job->streams.assign(streams, streams + n_streams);
  job->done.reset(new std::atomic<int>[n_layers]);
  for (int l = 0; l < n_layers; ++l) job->done[l].store(0);
  for (int i = 0; i < n_layers * n_streams; ++i) job->events.push_back(take_event());
  cudaGetDevice(&job->device);
  cudaError_t rc = cudaSuccess;
  if (!(flags & 2)) {
    cudaEvent_t start = stream_event(main);
    rc = start ? cudaEventRecord(start, static_cast<cudaStream_t>(main)) : cudaErrorUnknown;
    for (int i = 0; i < n_streams && rc == cudaSuccess; ++i)
      rc = cudaStreamWaitEvent(static_cast<cudaStream_t>(streams[i]), start, 0);
  }
  if (rc != cudaSuccess) {
    delete job;
    return static_cast<int>(rc);
  }
  for (int t = 0; t < n_streams; ++t) async_issuer().submit(t, [job, t] { job->run(t); });
  *job_out = job;
  return 0;
}

int kvt_ce_layers_wait(void* handle, int layer, void* stream) {
  auto* job = static_cast<LayerJob*>(handle);
  if (layer < 0 || layer >= job->n_layers) return kBadArgs;
  while (job->done[layer].load(std::memory_order_acquire) < job->n_streams) cpu_relax();
  for (int t = 0; t < job->n_streams; ++t) {
    cudaError_t rc = cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), job->events[layer * job->n_streams + t], 0);
    if (rc != cudaSuccess) return static_cast<int>(rc);
  }
  return job->rc.load();
}

int kvt_ce_layers_finish(void* handle) {
  auto* job = static_cast<LayerJob*>(handle);
  for (int t = 0; t < job->n_streams; ++t) async_issuer().join(t);
  const int rc = job->rc.load();
  {
    std::lock_guard<std::mutex> l(event_mu);
    free_events->insert(free_events->end(), job->events.begin(), job->events.end());
  }
  delete job;
  return rc;
}

// ---- copies as the memcpy nodes of an instantiated CUDA graph (kvt_graph_*) ----
//
// n independent 1D memcpy nodes, instantiated once; each transfer rewrites the nodes' addresses
// in the executable graph (cudaGraphExecMemcpyNodeSetParams1D; unused nodes disabled) and
// launches it with one call, so the compute's launches wait for one driver call, not one per copy.

struct CopyGraph {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  std::vector<cudaGraphNode_t> nodes;
  std::vector<char> enabled;
};

int kvt_graph_create(int64_t n, void* dst0, const void* src0, int64_t size0, void** out) {
  if (n <= 0) return kBadArgs;
  auto* g = new CopyGraph();
  cudaError_t rc = cudaGraphCreate(&g->graph, 0);
  g->nodes.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n && rc == cudaSuccess; ++i)
    rc = cudaGraphAddMemcpyNode1D(&g->nodes[i], g->graph, nullptr, 0, dst0, src0, static_cast<size_t>(size0),
                                  cudaMemcpyDefault);
  if (rc == cudaSuccess) rc = cudaGraphInstantiate(&g->exec, g->graph, 0);
  if (rc != cudaSuccess) {
    if (g->graph) cudaGraphDestroy(g->graph);
    delete g;
    return static_cast<int>(rc);
  }
  g->enabled.assign(static_cast<size_t>(n), 1);
  *out = g;
  return 0;
}

// One node per (slot, run of pages adjacent on both sides), as kvt_ce_pages plans them; the
// graph must have at least as many nodes.
int kvt_graph_copy(void* handle, const int64_t* src_bases, const int64_t* dst_bases, int n_slots,
                   const int64_t* src_pages, const int64_t* dst_pages, int64_t n_pages, int64_t sps, int64_t dps,
                   int64_t page_bytes, int merge, void* stream) {
  auto* g = static_cast<CopyGraph*>(handle);
  const auto runs = page_runs(src_pages, dst_pages, n_pages, merge && sps == page_bytes && dps == page_bytes);
  const size_t count = runs.size() * static_cast<size_t>(n_slots);
  if (count > g->nodes.size()) return kBadArgs;
  size_t k = 0;
  for (int i = 0; i < n_slots; ++i)
    for (const auto& r : runs) {
      void* dst = reinterpret_cast<void*>(dst_bases[i] + dst_pages[r.first] * dps);
      const void* src = reinterpret_cast<const void*>(src_bases[i] + src_pages[r.first] * sps);
      const size_t size = static_cast<size_t>((r.second - r.first) * page_bytes);
      cudaError_t rc = cudaGraphExecMemcpyNodeSetParams1D(g->exec, g->nodes[k], dst, src, size, cudaMemcpyDefault);
      if (rc == cudaSuccess && !g->enabled[k]) {
        rc = cudaGraphNodeSetEnabled(g->exec, g->nodes[k], 1);
        g->enabled[k] = 1;
      }
      if (rc != cudaSuccess) return static_cast<int>(rc);
      ++k;
    }
  for (; k < g->nodes.size(); ++k)
    if (g->enabled[k]) {
      cudaError_t rc = cudaGraphNodeSetEnabled(g->exec, g->nodes[k], 0);
      if (rc != cudaSuccess) return static_cast<int>(rc);
      g->enabled[k] = 0;
    }
  return static_cast<int>(cudaGraphLaunch(g->exec, static_cast<cudaStream_t>(stream)));
}

int kvt_graph_destroy(void* handle) {
  auto* g = static_cast<CopyGraph*>(handle);
  cudaGraphExecDestroy(g->exec);
  cudaGraphDestroy(g->graph);
  delete g;
  return 0;
}

// A kernel that holds `stream` for `ns` nanoseconds: work queued behind it is issued before it
// runs, so events around that work time its execution without the host's issue cost.
int kvt_sleep(int64_t ns, void* stream) {
  sleep_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(ns);
  return static_cast<int>(cudaGetLastError());
}

// Driver-allocated pinned host memory (cudaHostAlloc), for comparison with registered pools.
int kvt_host_alloc(int64_t bytes, unsigned flags, void** out) {
  return static_cast<int>(cudaHostAlloc(out, static_cast<size_t>(bytes), flags));
}

int kvt_host_free(void* ptr) { return static_cast<int>(cudaFreeHost(ptr)); }

}  // extern "C"

// ---- one launch for every layer of a request (kvt_layers) ----

namespace {

struct LayersArgs {
  const int64_t* src_bases;  // [comp][layer] byte addresses (device table)
  const int64_t* dst_bases;
  const int64_t* src_idx;  // token slots; page p starts at idx[p * page]
  const int64_t* dst_idx;
  int64_t n_pages;
  int n_layers, n_comp, page;
  int64_t sps, dps;  // page strides, bytes
  uint32_t chunk;
  int chunks_per_page;
  int stages;
  int* done;  // [n_layers] counters (device), or null: no per-layer signal
};

// Item it (layer-major: layer, component, page, chunk) -> addresses; returns its layer.
__device__ __forceinline__ int layers_item(const LayersArgs& a, int64_t it, const char** src, char** dst) {
  const int64_t per_comp = a.n_pages * a.chunks_per_page;
  const int64_t per_layer = per_comp * a.n_comp;
  const int layer = static_cast<int>(it / per_layer);
  int64_t rem = it - layer * per_layer;
  const int comp = static_cast<int>(rem / per_comp);
  rem -= comp * per_comp;
  const int64_t p = rem / a.chunks_per_page;
  const int64_t c = rem - p * a.chunks_per_page;
  const int slot = comp * a.n_layers + layer;
  const int64_t sp = a.src_idx[p * a.page] / a.page, dp = a.dst_idx[p * a.page] / a.page;
  *src = reinterpret_cast<const char*>(a.src_bases[slot]) + sp * a.sps + c * a.chunk;
  *dst = reinterpret_cast<char*>(a.dst_bases[slot]) + dp * a.dps + c * a.chunk;
  return layer;
}

// Layers [from, to) are done for this block: its stores have landed (wait_group 0 before), made
// visible to other streams and the host, then one count per layer.
__device__ __forceinline__ void layers_signal(int* done, int from, int to) {
  if (done == nullptr || from >= to) return;
  asm volatile("fence.proxy.async;" ::: "memory");
  __threadfence_system();
  for (int l = from; l < to; ++l) atomicAdd(done + l, 1);
}

// One warp per block: lane 0 drives the ring (as bulk_kernel's one thread does), while the 32
// lanes compute the addresses of 32 items at a time (index and base-table reads off the issuing
// thread's critical path) and hand them over by shuffles; two windows of 32 are kept, since the
// ring issues up to `stages` (< 32) items ahead of the one it stores.
struct ItemWindow {
  uint64_t src = 0, dst = 0;
  int layer = 0;
};

__device__ __forceinline__ ItemWindow layers_window(const LayersArgs& a, int64_t k0, int64_t mine) {
  ItemWindow w;
  const int64_t k = k0 + (threadIdx.x & 31);
  if (k < mine) {
    const char* src;
    char* dst;
    w.layer = layers_item(a, blockIdx.x + k * gridDim.x, &src, &dst);
    w.src = reinterpret_cast<uint64_t>(src);
    w.dst = reinterpret_cast<uint64_t>(dst);
  }
  return w;
}

__device__ __forceinline__ ItemWindow layers_get(const ItemWindow& cur, const ItemWindow& nxt, int64_t base, int64_t k) {
  const bool in_cur = k < base + 32;
  const int lane = static_cast<int>(k - (in_cur ? base : base + 32));
  ItemWindow w;
  w.src = __shfl_sync(0xffffffffu, in_cur ? cur.src : nxt.src, lane);
  w.dst = __shfl_sync(0xffffffffu, in_cur ? cur.dst : nxt.dst, lane);
  w.layer = __shfl_sync(0xffffffffu, in_cur ? cur.layer : nxt.layer, lane);
  return w;
}

__global__ void layers_kernel(LayersArgs a) {
  extern __shared__ __align__(128) unsigned char ring[];
  __shared__ __align__(8) uint64_t bars[kMaxStages];
  const bool lead = threadIdx.x == 0;
  const int64_t items = a.n_pages * a.chunks_per_page * a.n_comp * a.n_layers;
  const int64_t mine = blockIdx.x < items ? (items - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
  if (lead) {
    for (int s = 0; s < a.stages; ++s) mbar_init(smem_addr(&bars[s]));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
  __syncwarp();
  int64_t base = 0;  // first item of the window `cur`
  ItemWindow cur = layers_window(a, 0, mine), nxt = layers_window(a, 32, mine);
  auto issue = [&](int64_t k) {
    const ItemWindow w = layers_get(cur, nxt, base, k);
    if (lead) {
      const int s = static_cast<int>(k % a.stages);
      const uint32_t bar = smem_addr(&bars[s]);
      mbar_expect(bar, a.chunk);
      bulk_load(smem_addr(ring + static_cast<size_t>(s) * a.chunk), reinterpret_cast<const void*>(w.src), a.chunk,
                bar);
    }
  };
  const int64_t pro = min(static_cast<int64_t>(a.stages), mine);
  for (int64_t k = 0; k < pro; ++k) issue(k);
  int signalled = 0;  // layers below this are signalled by this block
  for (int64_t k = 0; k < mine; ++k) {
    if (k == base + 32) {  // slide the windows (all lanes)
      base += 32;
      cur = nxt;
      nxt = layers_window(a, base + 32, mine);
    }
    const ItemWindow w = layers_get(cur, nxt, base, k);
    const int s = static_cast<int>(k % a.stages);
    if (lead) {
      mbar_wait(smem_addr(&bars[s]), static_cast<uint32_t>((k / a.stages) & 1));
      bulk_store(reinterpret_cast<void*>(w.dst), smem_addr(ring + static_cast<size_t>(s) * a.chunk), a.chunk);
    }
    if (k >= 1 && k - 1 + a.stages < mine) {
      if (lead) asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
      __syncwarp();
      issue(k - 1 + a.stages);
    }
    if (a.done != nullptr) {
      const int next_layer = k + 1 < mine ? layers_get(cur, nxt, base, k + 1).layer : a.n_layers;
      if (next_layer > w.layer) {  // this block's share of layers < next_layer has been stored
        if (lead) {
          asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
          layers_signal(a.done, signalled, next_layer);
        }
        signalled = next_layer;
      }
    }
  }
  if (lead) {
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
    layers_signal(a.done, signalled, a.n_layers);
  }
}

}  // namespace

extern "C" {

// Every layer of a request in one launch of `grid` persistent blocks (one issuing thread each, a
// ring of `stages` x `chunk` bytes), items in layer order; slot bases [comp][layer] on the
// device. `done` (device int32[n_layers], or null) gets +1 from every block per layer once that
// block's share of the layer has landed: layer l is loaded when done[l] has grown by `grid`.
int kvt_layers(const int64_t* src_bases, const int64_t* dst_bases, int n_comp, int n_layers, const int64_t* src_idx,
               const int64_t* dst_idx, int64_t n_pages, int64_t sps, int64_t dps, int page, int64_t page_bytes,
               int chunk, int stages, int grid, int* done, void* stream) {
  if (chunk <= 0 || chunk % 16 || page_bytes % chunk || stages < 2 || stages > kMaxStages || grid <= 0 ||
      n_comp <= 0 || n_layers <= 0)
    return kBadArgs;
  if (n_pages == 0) return 0;
  const size_t smem = static_cast<size_t>(chunk) * stages;
  static size_t smem_allowed = 48 << 10;
  if (smem > smem_allowed) {
    cudaError_t rc =
        cudaFuncSetAttribute(layers_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (rc != cudaSuccess) return static_cast<int>(rc);
    smem_allowed = smem;
  }
  LayersArgs a{src_bases, dst_bases, src_idx, dst_idx, n_pages, n_layers, n_comp, page, sps, dps,
               static_cast<uint32_t>(chunk), static_cast<int>(page_bytes / chunk), stages, done};
  return static_cast<int>(launch(layers_kernel, grid, 32, smem, static_cast<cudaStream_t>(stream), false, a));
}

}  // extern "C"
