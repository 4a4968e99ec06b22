// dist.cpp - the c10d backend "tpu_dist": a c10d::Backend whose
// collectives are tasks of the C collectives layer (runtime/src/coll*.c).
//
// Ordering (documented in README): a collective on tpu tensors first
// flushes the chip's pending Fused Eager graph, records an event on the
// caller's current stream and makes the backend's own stream wait for it;
// the collective then runs on that stream (so it overlaps with later
// compute on the current stream). Work::wait() blocks the host until it has
// finished; the Work's future completes on the communicator's completion
// thread. Outputs that need a copy-back (tensor lists, non-contiguous
// tensors) are copied on the current stream after it waited for the
// collective's completion event. CPU tensors take the same C path
// synchronously. Across hosts (a `cross` gloo backend joins the ranks with
// the same local rank on every host) the collectives run hierarchically:
// shared memory inside the host, then gloo on the same memory (a CPU alias,
// no copy), synchronously; send/recv between hosts go through a `peers`
// gloo backend of all ranks (asynchronous, as gloo's).
#include "glue.h"

extern "C" {
#include "tpu_coll.h"
}

#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/utils/pybind.h>

#include <pybind11/pybind11.h>

#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>

namespace py = pybind11;

namespace torch_tpu {
namespace {

[[noreturn]] void dist_error(int code, const std::string& msg) {
  if (code == TPU_E_INVALID || code == TPU_E_TYPE || code == TPU_E_VALUE) throw_status(code, msg);
  C10_THROW_ERROR(DistBackendError, msg);
}

// Drop the GIL while blocking, if this thread holds it (c10d's bindings
// often call in with the GIL already released).
struct NoGil {
  std::optional<py::gil_scoped_release> r;
  NoGil() {
    if (Py_IsInitialized() && PyGILState_Check()) r.emplace();
  }
};

int coll_op(const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return TPUCOLL_SUM;
    case c10d::ReduceOp::PRODUCT: return TPUCOLL_PROD;
    case c10d::ReduceOp::MIN: return TPUCOLL_MIN;
    case c10d::ReduceOp::MAX: return TPUCOLL_MAX;
    case c10d::ReduceOp::AVG: return TPUCOLL_AVG;
    default:
      TORCH_CHECK_VALUE(false, "tpu_dist: ReduceOp ", (int)op.op_,
                        " is not supported (SUM, PRODUCT, MIN, MAX, AVG are)");
  }
}

int coll_dtype(const at::Tensor& t) {
  int dt = to_tpu_dtype(t.scalar_type());
  TORCH_CHECK_TYPE(dt >= 0, "tpu_dist: unsupported dtype ", t.scalar_type());
  return dt;
}

// Shared between a Work and the C completion callback.
struct Completion {
  c10::intrusive_ptr<c10::ivalue::Future> fut;
  std::vector<at::Tensor> result;
  int remaining;  // C works still to finish (coalesced ops enqueue several)
  int status = TPU_OK;
  std::string msg;
  std::mutex mu;
};

void on_done(void* ctx, int status, const char* msg) {
  auto* h = static_cast<std::shared_ptr<Completion>*>(ctx);
  auto c = *h;
  delete h;
  bool last;
  {
    std::lock_guard<std::mutex> g(c->mu);
    if (status != TPU_OK && c->status == TPU_OK) {
      c->status = status;
      c->msg = msg;
    }
    last = --c->remaining == 0;
  }
  if (!last) return;
  if (c->status != TPU_OK) {
    c->fut->setError(std::make_exception_ptr(c10::DistBackendError(
        {__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, c->msg)));
  } else {
    c->fut->markCompleted(c10::IValue(c->result));
  }
}

class TpuWork : public c10d::Work {
 public:
  TpuWork(int rank, c10d::OpType op, std::vector<tpucoll_work*> works,
          std::shared_ptr<Completion> comp, std::function<void()> after)
      : Work(rank, op), works_(std::move(works)), comp_(std::move(comp)),
        after_(std::move(after)) {}
  ~TpuWork() override {
    for (auto* w : works_) tpucoll_work_release(w);
  }
  bool isCompleted() override {
    for (auto* w : works_)
      if (!tpucoll_work_query(w)) return false;
    return true;
  }
  bool isSuccess() const override {
    for (auto* w : works_)
      if (!tpucoll_work_query(w)) return false;
    return comp_->status == TPU_OK;
  }
  bool wait(std::chrono::milliseconds /*timeout: the communicator's own bounds apply*/) override {
    int rc = TPU_OK;
    std::string msg;
    {
      NoGil nogil;
      for (auto* w : works_) {
        int r = tpucoll_work_wait(w);
        if (r != TPU_OK && rc == TPU_OK) {
          rc = r;
          msg = tpu_last_error();
        }
      }
    }
    if (rc != TPU_OK) dist_error(rc, msg);
    if (after_) {
      auto f = std::move(after_);
      after_ = nullptr;
      f();
    }
    return true;
  }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return comp_->fut; }
  std::vector<at::Tensor> result() override { return comp_->result; }

 private:
  std::vector<tpucoll_work*> works_;
  std::shared_ptr<Completion> comp_;
  std::function<void()> after_;  // CPU copy-backs (host side, after wait)
};

// A completed Work (synchronous paths).
c10::intrusive_ptr<c10d::Work> done_work(int rank, c10d::OpType op, std::vector<at::Tensor> result) {
  auto comp = std::make_shared<Completion>();
  comp->fut = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
  comp->result = std::move(result);
  comp->remaining = 0;
  comp->fut->markCompleted(c10::IValue(comp->result));
  return c10::make_intrusive<TpuWork>(rank, op, std::vector<tpucoll_work*>{}, comp, nullptr);
}

// Works of another backend (gloo: send/recv between hosts), with host-side
// follow-ups (copy-backs) once they have finished; holds the buffers.
class AfterWork : public c10d::Work {
 public:
  AfterWork(int rank, c10d::OpType op, std::vector<c10::intrusive_ptr<c10d::Work>> works,
            std::function<void()> after, std::vector<at::Tensor> keep)
      : Work(rank, op), works_(std::move(works)), after_(std::move(after)), keep_(std::move(keep)) {}
  bool isCompleted() override {
    for (auto& w : works_)
      if (!w->isCompleted()) return false;
    return true;
  }
  bool wait(std::chrono::milliseconds timeout) override {
    {
      NoGil nogil;
      for (auto& w : works_) w->wait(timeout);
    }
    if (after_) {
      auto f = std::move(after_);
      after_ = nullptr;
      f();
    }
    return true;
  }

 private:
  std::vector<c10::intrusive_ptr<c10d::Work>> works_;
  std::function<void()> after_;
  std::vector<at::Tensor> keep_;
};

}  // namespace

class __attribute__((visibility("hidden"))) TpuBackend : public c10d::Backend {
 public:
  TpuBackend(int rank, int size, tpucoll_comm* comm, int local_rank, int local_size,
             c10::intrusive_ptr<c10d::Backend> cross, c10::intrusive_ptr<c10d::Backend> peers)
      : Backend(rank, size), comm_(comm), local_rank_(local_rank), local_size_(local_size),
        cross_(std::move(cross)), peers_(std::move(peers)) {}
  ~TpuBackend() override { shutdown(); }

  const std::string getBackendName() const override { return "tpu_dist"; }
  bool supportsCoalescing() const override { return false; }

  void shutdown() override {
    std::lock_guard<std::mutex> g(mu_);
    if (!comm_) return;
    {
      NoGil nogil;
      if (stream_) tpurt_stream_synchronize(stream_);
      tpucoll_comm_drain(comm_);
    }
    tpucoll_comm_destroy(comm_);
    comm_ = nullptr;
  }
  void abort() override {
    std::lock_guard<std::mutex> g(mu_);
    if (comm_) tpucoll_comm_abort(comm_, "ProcessGroup.abort()");
  }
  void setTimeout(std::chrono::milliseconds timeout) override {
    if (comm_) tpucoll_comm_set_timeout(comm_, timeout.count());
  }

  // ---- the collectives -------------------------------------------------
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& ts,
                                           const c10d::AllreduceOptions& o) override {
    auto& t = one(ts, "all_reduce");
    int op = coll_op(o.reduceOp);
    if (cross_) return hier_allreduce(t, op, o.reduceOp);
    auto buf = flat_in(t);
    tpucoll_desc d = desc(TPUCOLL_ALL_REDUCE, buf, buf, buf.numel(), coll_dtype(t));
    d.op = op;
    return issue(c10d::OpType::ALLREDUCE, {d}, {t}, copy_back(buf, t), {buf});
  }

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& ts,
                                                     const c10d::AllreduceCoalescedOptions& o) override {
    TORCH_CHECK(!ts.empty(), "tpu_dist: allreduce_coalesced needs tensors");
    std::vector<at::Tensor> flats;
    for (auto& t : ts) flats.push_back(t.reshape({-1}));
    auto buf = at::cat(flats);
    std::vector<at::Tensor> bufs{buf};
    auto w = allreduce(bufs, o);
    auto outs = ts;
    auto after = [buf, outs]() mutable {
      int64_t off = 0;
      for (auto& t : outs) {
        t.copy_(buf.narrow(0, off, t.numel()).view(t.sizes()));
        off += t.numel();
      }
    };
    w->wait();
    after();
    return done_work(getRank(), c10d::OpType::ALLREDUCE_COALESCED, ts);
  }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& ts,
                                           const c10d::BroadcastOptions& o) override {
    auto& t = one(ts, "broadcast");
    check_root(o.rootRank);
    if (cross_) return hier_broadcast(t, o.rootRank);
    auto buf = flat_in(t);
    tpucoll_desc d = desc(TPUCOLL_BROADCAST, buf, buf, buf.numel(), coll_dtype(t));
    d.root = (int)o.rootRank;
    return issue(c10d::OpType::BROADCAST, {d}, {t}, copy_back(buf, t), {buf});
  }

  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& ts,
                                        const c10d::ReduceOptions& o) override {
    auto& t = one(ts, "reduce");
    check_root(o.rootRank);
    if (cross_) return hier_reduce(t, coll_op(o.reduceOp), o.reduceOp, (int)o.rootRank);
    auto buf = flat_in(t);
    tpucoll_desc d = desc(TPUCOLL_REDUCE, buf, buf, buf.numel(), coll_dtype(t));
    d.op = coll_op(o.reduceOp);
    d.root = (int)o.rootRank;
    return issue(c10d::OpType::REDUCE, {d}, {t}, copy_back(buf, t), {buf});
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& out, at::Tensor& in,
                                                 const c10d::AllgatherOptions&) override {
    check_tensor(in);
    check_tensor(out);
    TORCH_CHECK_VALUE(out.numel() == in.numel() * getSize(), "tpu_dist: all_gather_into_tensor: output has ",
                      out.numel(), " elements, expected world_size * input = ", in.numel() * getSize());
    TORCH_CHECK_TYPE(out.scalar_type() == in.scalar_type(), "tpu_dist: all_gather dtype mismatch ",
                     out.scalar_type(), " vs ", in.scalar_type());
    if (cross_) return hier_allgather(out, in);
    auto src = flat_in(in);
    auto dst = flat_out(out);
    tpucoll_desc d = desc(TPUCOLL_ALL_GATHER, src, dst, src.numel(), coll_dtype(in));
    return issue(c10d::OpType::_ALLGATHER_BASE, {d}, {out}, copy_back(dst, out), {src, dst});
  }

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outs,
                                           std::vector<at::Tensor>& ins,
                                           const c10d::AllgatherOptions& o) override {
    auto& in = one(ins, "all_gather");
    TORCH_CHECK_VALUE(outs.size() == 1 && (int)outs[0].size() == getSize(),
                      "tpu_dist: all_gather needs one output list of world_size tensors");
    for (auto& t : outs[0])
      TORCH_CHECK_VALUE(t.numel() == in.numel(), "tpu_dist: all_gather output tensor has ", t.numel(),
                        " elements, input has ", in.numel());
    auto flat = at::empty({in.numel() * getSize()}, in.options());
    auto w = _allgather_base(flat, in, o);
    auto list = outs[0];
    int64_t n = in.numel();
    return chain(w, c10d::OpType::ALLGATHER, list, [flat, list, n]() mutable {
      for (size_t k = 0; k < list.size(); k++)
        list[k].copy_(flat.narrow(0, (int64_t)k * n, n).view(list[k].sizes()));
    });
  }

  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outs,
                                                                 std::vector<at::Tensor>& ins,
                                                                 const c10d::AllgatherOptions& o) override {
    TORCH_CHECK_VALUE(outs.size() == ins.size(), "tpu_dist: coalesced all_gather: list lengths differ");
    c10::intrusive_ptr<c10d::Work> w;
    for (size_t i = 0; i < ins.size(); i++) {
      if (w) w->wait();
      w = _allgather_base(outs[i], ins[i], o);
    }
    return w ? w : done_work(getRank(), c10d::OpType::COALESCED, {});
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& out, at::Tensor& in,
                                                      const c10d::ReduceScatterOptions& o) override {
    check_tensor(in);
    check_tensor(out);
    TORCH_CHECK_VALUE(in.numel() == out.numel() * getSize(), "tpu_dist: reduce_scatter_tensor: input has ",
                      in.numel(), " elements, expected world_size * output = ", out.numel() * getSize());
    TORCH_CHECK_TYPE(out.scalar_type() == in.scalar_type(), "tpu_dist: reduce_scatter dtype mismatch");
    if (cross_) return hier_reduce_scatter(out, in, coll_op(o.reduceOp), o.reduceOp);
    auto src = flat_in(in);
    auto dst = flat_out(out);
    tpucoll_desc d = desc(TPUCOLL_REDUCE_SCATTER, src, dst, dst.numel(), coll_dtype(in));
    d.op = coll_op(o.reduceOp);
    return issue(c10d::OpType::_REDUCE_SCATTER_BASE, {d}, {out}, copy_back(dst, out), {src, dst});
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outs,
                                                std::vector<std::vector<at::Tensor>>& ins,
                                                const c10d::ReduceScatterOptions& o) override {
    auto& out = one(outs, "reduce_scatter");
    TORCH_CHECK_VALUE(ins.size() == 1 && (int)ins[0].size() == getSize(),
                      "tpu_dist: reduce_scatter needs one input list of world_size tensors");
    std::vector<at::Tensor> flats;
    for (auto& t : ins[0]) {
      TORCH_CHECK_VALUE(t.numel() == out.numel(), "tpu_dist: reduce_scatter input tensor has ", t.numel(),
                        " elements, output has ", out.numel());
      flats.push_back(t.reshape({-1}));
    }
    auto in = at::cat(flats);
    return _reduce_scatter_base(out, in, o);
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outs,
                                                                 std::vector<at::Tensor>& ins,
                                                                 const c10d::ReduceScatterOptions& o) override {
    TORCH_CHECK_VALUE(outs.size() == ins.size(), "tpu_dist: coalesced reduce_scatter: list lengths differ");
    c10::intrusive_ptr<c10d::Work> w;
    for (size_t i = 0; i < ins.size(); i++) {
      if (w) w->wait();
      w = _reduce_scatter_base(outs[i], ins[i], o);
    }
    return w ? w : done_work(getRank(), c10d::OpType::COALESCED, {});
  }

  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& out, at::Tensor& in,
                                               std::vector<int64_t>& out_splits,
                                               std::vector<int64_t>& in_splits,
                                               const c10d::AllToAllOptions&) override {
    check_tensor(in);
    check_tensor(out);
    int n = getSize();
    auto counts = [&](const at::Tensor& t, const std::vector<int64_t>& splits, const char* what) {
      std::vector<size_t> c(n);
      int64_t rows = t.dim() ? t.size(0) : 1, row = rows ? t.numel() / rows : 0;
      if (splits.empty()) {
        TORCH_CHECK_VALUE(rows % n == 0, "tpu_dist: all_to_all_single: ", what, " dim 0 (", rows,
                          ") is not divisible by world_size ", n);
        for (int k = 0; k < n; k++) c[k] = (size_t)(rows / n * row);
      } else {
        TORCH_CHECK_VALUE((int)splits.size() == n, "tpu_dist: all_to_all_single: ", what,
                          " split sizes need world_size entries");
        int64_t sum = 0;
        for (int k = 0; k < n; k++) {
          c[k] = (size_t)(splits[k] * row);
          sum += splits[k];
        }
        TORCH_CHECK_VALUE(sum == rows, "tpu_dist: all_to_all_single: ", what, " splits sum to ", sum,
                          " but dim 0 is ", rows);
      }
      return c;
    };
    auto sc = counts(in, in_splits, "input");
    auto rc = counts(out, out_splits, "output");
    if (cross_) return hier_alltoall(out, in, sc, rc);
    auto src = flat_in(in);
    auto dst = flat_out(out);
    tpucoll_desc d = desc(TPUCOLL_ALL_TO_ALL, src, dst, 0, coll_dtype(in));
    d.send_counts = sc.data();
    d.recv_counts = rc.data();
    return issue(c10d::OpType::ALLTOALL_BASE, {d}, {out}, copy_back(dst, out), {src, dst});
  }

  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outs, std::vector<at::Tensor>& ins,
                                          const c10d::AllToAllOptions& o) override {
    int n = getSize();
    TORCH_CHECK_VALUE((int)outs.size() == n && (int)ins.size() == n,
                      "tpu_dist: all_to_all needs world_size input and output tensors");
    std::vector<at::Tensor> fi, fo;
    std::vector<int64_t> is, os;
    for (auto& t : ins) {
      fi.push_back(t.reshape({-1}));
      is.push_back(t.numel());
    }
    for (auto& t : outs) os.push_back(t.numel());
    auto in = at::cat(fi);
    int64_t total = 0;
    for (auto v : os) total += v;
    auto out = at::empty({total}, outs[0].options());
    auto w = alltoall_base(out, in, os, is, o);
    auto list = outs;
    return chain(w, c10d::OpType::ALLTOALL, list, [out, list]() mutable {
      int64_t off = 0;
      for (auto& t : list) {
        t.copy_(out.narrow(0, off, t.numel()).view(t.sizes()));
        off += t.numel();
      }
    });
  }

  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outs,
                                        std::vector<at::Tensor>& ins, const c10d::GatherOptions& o) override {
    // an all_to_all in which every rank sends only to root
    auto& in = one(ins, "gather");
    check_root(o.rootRank);
    int n = getSize(), root = (int)o.rootRank;
    bool is_root = getRank() == root;
    TORCH_CHECK_VALUE(!is_root || (outs.size() == 1 && (int)outs[0].size() == n),
                      "tpu_dist: gather needs world_size output tensors on the root");
    std::vector<int64_t> isp(n, 0), osp(n, 0);
    isp[root] = in.numel();
    if (is_root) std::fill(osp.begin(), osp.end(), in.numel());
    auto src = in.reshape({-1});
    auto out = at::empty({is_root ? in.numel() * n : 0}, in.options());
    auto w = alltoall_base(out, src, osp, isp, c10d::AllToAllOptions());
    std::vector<at::Tensor> list = is_root ? outs[0] : std::vector<at::Tensor>{};
    int64_t m = in.numel();
    return chain(w, c10d::OpType::GATHER, list, [out, list, m]() mutable {
      for (size_t k = 0; k < list.size(); k++) list[k].copy_(out.narrow(0, (int64_t)k * m, m).view(list[k].sizes()));
    });
  }

  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outs,
                                         std::vector<std::vector<at::Tensor>>& ins,
                                         const c10d::ScatterOptions& o) override {
    auto& out = one(outs, "scatter");
    check_root(o.rootRank);
    int n = getSize(), root = (int)o.rootRank;
    bool is_root = getRank() == root;
    TORCH_CHECK_VALUE(!is_root || (ins.size() == 1 && (int)ins[0].size() == n),
                      "tpu_dist: scatter needs world_size input tensors on the root");
    std::vector<int64_t> isp(n, 0), osp(n, 0);
    osp[root] = out.numel();
    at::Tensor src;
    if (is_root) {
      std::vector<at::Tensor> f;
      for (auto& t : ins[0]) f.push_back(t.reshape({-1}));
      src = at::cat(f);
      std::fill(isp.begin(), isp.end(), out.numel());
    } else {
      src = at::empty({0}, out.options());
    }
    auto flat = out.is_contiguous() ? out.view({-1}) : at::empty({out.numel()}, out.options());
    auto w = alltoall_base(flat, src, osp, isp, c10d::AllToAllOptions());
    if (out.is_contiguous()) return w;
    std::vector<at::Tensor> list{out};
    return chain(w, c10d::OpType::SCATTER, list, [flat, list]() mutable { list[0].copy_(flat.view(list[0].sizes())); });
  }

  // Several tensors: one message each, in order, all covered by one Work.
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& ts, int dst, int tag) override {
    TORCH_CHECK_VALUE(!ts.empty(), "tpu_dist: send needs at least one tensor");
    check_peer(dst, "send to");
    if (cross_ && host_of(dst) != host_of(getRank())) return gloo_p2p(true, ts, dst, tag);
    std::vector<tpucoll_desc> ds;
    std::vector<at::Tensor> keep;
    for (auto& t : ts) {
      check_tensor(t);
      auto buf = flat_in(t);
      tpucoll_desc d = desc(TPUCOLL_SEND, buf, buf, (size_t)buf.nbytes(), coll_dtype(t));
      d.root = dst % local_size_;  // the peer's local rank
      d.tag = tag;
      ds.push_back(d);
      keep.push_back(buf);
    }
    return issue(c10d::OpType::SEND, ds, ts, nullptr, keep);
  }

  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& ts, int src, int tag) override {
    TORCH_CHECK_VALUE(!ts.empty(), "tpu_dist: recv needs at least one tensor");
    check_peer(src, "recv from");
    if (cross_ && host_of(src) != host_of(getRank())) return gloo_p2p(false, ts, src, tag);
    std::vector<tpucoll_desc> ds;
    std::vector<std::function<void()>> backs;
    for (auto& t : ts) {
      check_tensor(t);
      auto buf = flat_out(t);
      tpucoll_desc d = desc(TPUCOLL_RECV, buf, buf, (size_t)buf.nbytes(), coll_dtype(t));
      d.root = src % local_size_;  // the peer's local rank
      d.tag = tag;
      ds.push_back(d);
      if (auto f = copy_back(buf, t)) backs.push_back(std::move(f));
    }
    std::function<void()> after;
    if (!backs.empty())
      after = [backs]() {
        for (auto& f : backs) f();
      };
    return issue(c10d::OpType::RECV, ds, ts, after);
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions&) override {
    tpucoll_desc d = desc(TPUCOLL_BARRIER, at::Tensor(), at::Tensor(), 0, TPU_F32);
    auto w = issue(c10d::OpType::BARRIER, {d}, {}, nullptr);
    if (cross_) {
      w->wait();
      cross_->barrier(c10d::BarrierOptions())->wait();
      return done_work(getRank(), c10d::OpType::BARRIER, {});
    }
    return w;
  }

 private:
  int dev_ = -1;  // the rank's chip: bound by the first tpu tensor
  tpucoll_comm* comm_;
  int local_rank_, local_size_;
  c10::intrusive_ptr<c10d::Backend> cross_;  // ranks with this local rank, one per host (gloo)
  c10::intrusive_ptr<c10d::Backend> peers_;  // every rank (gloo): send/recv between hosts
  tpurt_stream* stream_ = nullptr;  // created with dev_
  std::mutex mu_;

  at::Tensor& one(std::vector<at::Tensor>& ts, const char* what) {
    TORCH_CHECK_VALUE(ts.size() == 1, "tpu_dist: ", what, " takes exactly one tensor per process, got ", ts.size());
    check_tensor(ts[0]);
    return ts[0];
  }
  void check_tensor(const at::Tensor& t) {
    TORCH_CHECK(t.device().is_cpu() || t.device().is_privateuseone(), "tpu_dist: tensors must be on tpu or cpu, got ",
                t.device());
    if (t.device().is_privateuseone()) {
      std::lock_guard<std::mutex> g(mu_);
      if (dev_ < 0) {
        // first tpu tensor: bind this rank to its chip, make our stream
        tpurt_stream* s = tpurt_stream_create(t.device().index());
        if (!s) check(TPU_E_INTERNAL);
        dev_ = t.device().index();
        stream_ = s;
      }
      TORCH_CHECK(t.device().index() == dev_, "tpu_dist: tensor on ", t.device(),
                  " but this rank's process group is bound to tpu:", dev_,
                  " (each rank uses its own chip: torch.tpu.set_device(local_rank))");
    }
    TORCH_CHECK(!t.is_sparse(), "tpu_dist: sparse tensors are not supported");
  }
  void check_peer(int peer, const char* what) {
    TORCH_CHECK_VALUE(peer >= 0 && peer < getSize() && peer != getRank(), "tpu_dist: ", what, " rank ", peer,
                      ": not another rank of this group (rank ", getRank(), " of ", getSize(), ")");
  }
  void check_root(int64_t root) {
    TORCH_CHECK_VALUE(root >= 0 && root < getSize(), "tpu_dist: root rank ", root, " out of range [0, ", getSize(), ")");
  }
  static at::Tensor flat_in(const at::Tensor& t) { return t.is_contiguous() ? t.view({-1}) : t.contiguous().view({-1}); }
  static at::Tensor flat_out(const at::Tensor& t) {
    return t.is_contiguous() ? t.view({-1}) : at::empty({t.numel()}, t.options());
  }
  // Copy the flat buffer back into t when they are different storage.
  static std::function<void()> copy_back(const at::Tensor& buf, const at::Tensor& t) {
    if (t.is_contiguous()) return nullptr;
    at::Tensor b = buf, dst = t;
    return [b, dst]() mutable { dst.copy_(b.view(dst.sizes())); };
  }
  static tpucoll_desc desc(int kind, const at::Tensor& in, const at::Tensor& out, size_t count, int dtype) {
    tpucoll_desc d{};
    d.kind = kind;
    d.in = in.defined() ? in.data_ptr() : nullptr;
    d.out = out.defined() ? out.data_ptr() : nullptr;
    d.count = count;
    d.dtype = dtype;
    return d;
  }
  // Run on the calling thread instead of the chip's stream when nothing is
  // queued before the collective: no pending Fused Eager ops on the chip,
  // the current stream and ours idle, no earlier collective in flight. The
  // hand-off to the stream worker (and the completion thread) would only
  // add wake-ups: on a 2-core host, three threads per rank competing for the
  // CPUs. The Work is then complete on return (errors raise at the call).
  // Never for send/recv: a send may block until the peer's recv, which this
  // thread may post only after it (isend then recv). TORCH_TPU_DIST_INLINE=0
  // turns it off.
  bool can_inline(const std::vector<tpucoll_desc>& ds, tpurt_stream* cur, const std::vector<at::Tensor>& result,
                  const std::vector<at::Tensor>& keep) {
    static const bool enabled = [] {
      const char* e = std::getenv("TORCH_TPU_DIST_INLINE");
      return !(e && e[0] == '0');
    }();
    if (!enabled) return false;
    for (auto& d : ds)
      if (d.kind == TPUCOLL_SEND || d.kind == TPUCOLL_RECV) return false;
    if (tpug_stream_query(cur) != 1 || tpurt_stream_query(stream_) != 1 || tpucoll_comm_idle(comm_) != 1)
      return false;
    // fresh blocks (deferred empty) read as pending until the host touches
    // them: mark the buffers used (no pending ops, so this flushes nothing)
    for (auto* ts : {&result, &keep})
      for (auto& t : *ts)
        if (t.defined() && t.device().is_privateuseone() && t.storage().data())
          check(tpug_flush_if_uses(dev_, t.storage().data(), TPUG_R_SYNC));
    return tpug_stream_query(cur) == 1;  // another thread may have recorded ops meanwhile
  }

  // Enqueue the collectives on the backend stream after the current
  // stream's work; `after` (copy-backs) runs on the current stream after
  // the collectives (tpu) or on the host after they finished (cpu).
  c10::intrusive_ptr<c10d::Work> issue(c10d::OpType op, std::vector<tpucoll_desc> ds, std::vector<at::Tensor> result,
                                       std::function<void()> after, std::vector<at::Tensor> keep = {}) {
    TORCH_CHECK(comm_, "tpu_dist: the process group was shut down");
    bool on_tpu = false;
    for (auto& t : result) on_tpu |= t.device().is_privateuseone();
    for (auto& t : keep) on_tpu |= t.device().is_privateuseone();
    auto comp = std::make_shared<Completion>();
    comp->fut = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
    comp->result = result;
    comp->remaining = (int)ds.size();
    // staging buffers: a free is stream-ordered after the enqueued
    // collective anyway; holding them in the Work keeps CPU ones alive too
    auto keep_alive = std::make_shared<std::vector<at::Tensor>>(keep);
    if (!on_tpu) {
      // CPU tensors (or none): run now on this thread, after whatever is
      // still queued on the stream
      int rc = TPU_OK;
      std::string msg;
      {
        NoGil nogil;
        std::lock_guard<std::mutex> g(mu_);
        TORCH_CHECK(comm_, "tpu_dist: the process group was shut down");
        if (stream_) tpurt_stream_synchronize(stream_);
        tpucoll_comm_drain(comm_);
        for (auto& d : ds) {
          rc = tpucoll_run(comm_, &d);
          if (rc != TPU_OK) {
            msg = tpu_last_error();
            break;
          }
        }
      }
      if (rc != TPU_OK) dist_error(rc, msg);
      if (after) after();
      return done_work(getRank(), op, result);
    }
    tpurt_stream* cur = current_stream(static_cast<c10::DeviceIndex>(dev_));
    if (can_inline(ds, cur, result, keep)) {
      // Nothing is queued before the collective: run it here (see can_inline).
      int rc = TPU_OK;
      std::string msg;
      {
        NoGil nogil;
        std::lock_guard<std::mutex> g(mu_);
        TORCH_CHECK(comm_, "tpu_dist: the process group was shut down");
        for (auto& d : ds) {
          rc = tpucoll_run(comm_, &d);
          if (rc != TPU_OK) {
            msg = tpu_last_error();
            break;
          }
        }
      }
      if (rc != TPU_OK) dist_error(rc, msg);
      if (after) after();  // device copies on the current stream
      return done_work(getRank(), op, result);
    }
    {
      tpurt_event* ev = tpurt_event_create();
      TORCH_CHECK(ev, "tpu_dist: cannot create an event");
      // flushes Fused Eager work first: a collective is a graph break
      int rc = tpug_event_record(ev, cur);
      if (rc == TPU_OK) rc = tpurt_stream_wait_event(stream_, ev);
      tpurt_event_destroy(ev);
      check(rc);
    }
    std::vector<tpucoll_work*> works;
    {
      std::lock_guard<std::mutex> g(mu_);
      TORCH_CHECK(comm_, "tpu_dist: the process group was shut down");
      for (auto& d : ds) {
        tpucoll_work* w = nullptr;
        auto* ctx = new std::shared_ptr<Completion>(comp);
        int rc = tpucoll_enqueue(comm_, stream_, &d, on_done, ctx, &w);
        if (rc != TPU_OK) {
          delete ctx;
          for (auto* x : works) tpucoll_work_release(x);
          check(rc);
        }
        works.push_back(w);
      }
    }
    std::function<void()> host_after;
    if (after) {
      tpurt_event* done = tpurt_event_create();
      TORCH_CHECK(done, "tpu_dist: cannot create an event");
      int rc = tpurt_event_record(done, stream_);
      if (rc == TPU_OK) rc = tpurt_stream_wait_event(cur, done);
      tpurt_event_destroy(done);
      check(rc);
      after();  // device copies, ordered after the collective on the current stream
    }
    return c10::make_intrusive<TpuWork>(getRank(), op, std::move(works), comp,
                                        [host_after, keep_alive]() { if (host_after) host_after(); });
  }

  // A follow-up on the host after `w` (tensor-list copy-backs).
  c10::intrusive_ptr<c10d::Work> chain(c10::intrusive_ptr<c10d::Work> w, c10d::OpType op,
                                       std::vector<at::Tensor> list, std::function<void()> f) {
    w->wait();
    f();
    return done_work(getRank(), op, std::move(list));
  }

  // ---- hierarchical (several hosts): shm inside the host, then gloo ----
  // Ranks are numbered host-major: rank = host * local_size_ + local rank.
  // The gloo steps run on the tensors' memory in place (a CPU alias), after
  // the chip has finished what it had queued (host_ready).
  int host_of(int rank) const { return rank / local_size_; }
  at::Tensor cpu_alias(const at::Tensor& t) {
    if (t.device().is_cpu()) return t;
    return at::from_blob(t.data_ptr(), t.sizes(), t.strides(), t.options().device(c10::kCPU));
  }
  void host_ready(const at::Tensor& t) {
    if (t.device().is_privateuseone()) synchronize_device(static_cast<c10::DeviceIndex>(dev_));
  }
  // The local (shared-memory) step, run to completion.
  void local(c10d::OpType op, const tpucoll_desc& d, const std::vector<at::Tensor>& bufs) {
    issue(op, {d}, bufs, nullptr, bufs)->wait();
  }
  // AVG: both steps sum, the result is divided by the world size at the end.
  static int local_op(int op) { return op == TPUCOLL_AVG ? TPUCOLL_SUM : op; }
  static c10d::ReduceOp gloo_op(int op, const c10d::ReduceOp& rop) {
    return op == TPUCOLL_AVG ? c10d::ReduceOp(c10d::ReduceOp::SUM) : rop;
  }
  // Copy the flat result back into t if they differ, wait for the chip.
  c10::intrusive_ptr<c10d::Work> finish(c10d::OpType op, at::Tensor& t, const at::Tensor& buf, bool avg) {
    if (avg) buf.div_(getSize());
    if (buf.data_ptr() != t.data_ptr() || !t.is_contiguous()) t.copy_(buf.view(t.sizes()));
    host_ready(t);
    return done_work(getRank(), op, {t});
  }

  c10::intrusive_ptr<c10d::Work> hier_allreduce(at::Tensor& t, int op, const c10d::ReduceOp& rop) {
    auto buf = flat_in(t);
    tpucoll_desc d = desc(TPUCOLL_ALL_REDUCE, buf, buf, buf.numel(), coll_dtype(t));
    d.op = local_op(op);
    local(c10d::OpType::ALLREDUCE, d, {buf});
    std::vector<at::Tensor> v{cpu_alias(buf)};
    c10d::AllreduceOptions o;
    o.reduceOp = gloo_op(op, rop);
    cross_->allreduce(v, o)->wait();
    return finish(c10d::OpType::ALLREDUCE, t, buf, op == TPUCOLL_AVG);
  }
  c10::intrusive_ptr<c10d::Work> hier_reduce(at::Tensor& t, int op, const c10d::ReduceOp& rop, int root) {
    // inside every host onto root's local rank, then across hosts onto root;
    // a rank other than root that carries its host's sum works on a copy, so
    // that, as inside one host, only root's tensor changes.
    int root_local = root % local_size_;
    bool is_root = getRank() == root, carrier = local_rank_ == root_local;
    auto buf = carrier && !is_root ? t.clone(at::MemoryFormat::Contiguous).view({-1}) : flat_in(t);
    tpucoll_desc d = desc(TPUCOLL_REDUCE, buf, buf, buf.numel(), coll_dtype(t));
    d.op = local_op(op);
    d.root = root_local;
    local(c10d::OpType::REDUCE, d, {buf});
    if (carrier) {
      host_ready(buf);
      std::vector<at::Tensor> v{cpu_alias(buf)};
      c10d::ReduceOptions o;
      o.reduceOp = gloo_op(op, rop);
      o.rootRank = host_of(root);
      cross_->reduce(v, o)->wait();
    }
    if (!is_root) return done_work(getRank(), c10d::OpType::REDUCE, {t});
    return finish(c10d::OpType::REDUCE, t, buf, op == TPUCOLL_AVG);
  }
  c10::intrusive_ptr<c10d::Work> hier_broadcast(at::Tensor& t, int64_t root) {
    // root's host: local broadcast from root; then across hosts among the
    // ranks with root's local rank; then inside every other host.
    auto buf = flat_in(t);
    int root_local = (int)(root % local_size_), root_host = host_of((int)root);
    tpucoll_desc d = desc(TPUCOLL_BROADCAST, buf, buf, buf.numel(), coll_dtype(t));
    d.root = root_local;
    if (host_of(getRank()) == root_host) local(c10d::OpType::BROADCAST, d, {buf});
    if (local_rank_ == root_local) {
      host_ready(buf);
      std::vector<at::Tensor> v{cpu_alias(buf)};
      c10d::BroadcastOptions o;
      o.rootRank = root_host;
      cross_->broadcast(v, o)->wait();
    }
    if (host_of(getRank()) != root_host) local(c10d::OpType::BROADCAST, d, {buf});
    return finish(c10d::OpType::BROADCAST, t, buf, false);
  }
  c10::intrusive_ptr<c10d::Work> hier_allgather(at::Tensor& out, const at::Tensor& in) {
    // inside the host into this host's block, then the host blocks across hosts
    int64_t n = in.numel();
    auto src = flat_in(in);
    auto host_block = at::empty({n * local_size_}, in.options());
    local(c10d::OpType::_ALLGATHER_BASE, desc(TPUCOLL_ALL_GATHER, src, host_block, n, coll_dtype(in)),
          {src, host_block});
    auto all = flat_out(out);
    host_ready(host_block);
    auto all_cpu = cpu_alias(all), blk_cpu = cpu_alias(host_block);
    cross_->_allgather_base(all_cpu, blk_cpu, c10d::AllgatherOptions())->wait();
    return finish(c10d::OpType::_ALLGATHER_BASE, out, all, false);
  }
  c10::intrusive_ptr<c10d::Work> hier_reduce_scatter(at::Tensor& out, const at::Tensor& in, int op,
                                                     const c10d::ReduceOp& rop) {
    // Rank (h, l)'s result is the reduction of block h * L + l of every
    // input. Inside the host, reduce-scatter the input reordered so that
    // local rank l gets the blocks (0..H-1, l); across hosts, reduce-scatter
    // those H blocks among the ranks with local rank l.
    int64_t n = out.numel(), hosts = getSize() / local_size_;
    auto mine = in.reshape({hosts, local_size_, n}).transpose(0, 1).contiguous().view({-1});
    auto part = at::empty({hosts * n}, in.options());
    tpucoll_desc d = desc(TPUCOLL_REDUCE_SCATTER, mine, part, hosts * n, coll_dtype(in));
    d.op = local_op(op);
    local(c10d::OpType::_REDUCE_SCATTER_BASE, d, {mine, part});
    auto dst = flat_out(out);
    host_ready(part);
    auto dst_cpu = cpu_alias(dst), part_cpu = cpu_alias(part);
    c10d::ReduceScatterOptions o;
    o.reduceOp = gloo_op(op, rop);
    cross_->_reduce_scatter_base(dst_cpu, part_cpu, o)->wait();
    return finish(c10d::OpType::_REDUCE_SCATTER_BASE, out, dst, op == TPUCOLL_AVG);
  }
  static at::Tensor cat_or_empty(const std::vector<at::Tensor>& ts, const at::TensorOptions& o) {
    return ts.empty() ? at::empty({0}, o) : at::cat(ts);
  }
  c10::intrusive_ptr<c10d::Work> hier_alltoall(at::Tensor& out, const at::Tensor& in, const std::vector<size_t>& sc,
                                               const std::vector<size_t>& rc) {
    // Two hops. Inside the host, rank (h, l) hands local rank m everything
    // it sends to ranks (*, m); across hosts, the ranks with local rank m
    // deliver it: each receives, host by host, the blocks of ranks
    // (h, 0..L-1) in rank order, which is out's layout. First every rank
    // learns every rank's send and receive counts (in elements).
    int W = getSize(), L = local_size_, H = W / L, h = host_of(getRank()), l = local_rank_;
    auto counts = at::empty({2 * W}, at::kLong);
    for (int k = 0; k < W; k++) {
      counts.data_ptr<int64_t>()[k] = (int64_t)sc[k];
      counts.data_ptr<int64_t>()[W + k] = (int64_t)rc[k];
    }
    auto all = at::empty({2 * W * W}, at::kLong);
    hier_allgather(all, counts);
    const int64_t* A = all.data_ptr<int64_t>();
    auto S = [&](int src, int dst) { return A[(size_t)src * 2 * W + dst]; };
    for (int s = 0; s < W; s++)  // every rank sees the same matrix: all raise, none hangs
      for (int r = 0; r < W; r++)
        TORCH_CHECK_VALUE(S(s, r) == A[(size_t)r * 2 * W + W + s], "tpu_dist: all_to_all: rank ", s, " sends ",
                          S(s, r), " elements to rank ", r, ", which expects ", A[(size_t)r * 2 * W + W + s]);
    auto src = flat_in(in);
    std::vector<int64_t> off(W + 1, 0);
    for (int k = 0; k < W; k++) off[k + 1] = off[k] + (int64_t)sc[k];
    std::vector<at::Tensor> pieces;
    std::vector<size_t> s1(L, 0), r1(L, 0);
    for (int m = 0; m < L; m++)
      for (int g = 0; g < H; g++) {
        int dst = g * L + m;
        pieces.push_back(src.narrow(0, off[dst], (int64_t)sc[dst]));
        s1[m] += sc[dst];
        r1[m] += (size_t)S(h * L + m, g * L + l);
      }
    auto hop1 = cat_or_empty(pieces, in.options());
    int64_t n1 = 0;
    for (auto c : r1) n1 += (int64_t)c;
    auto got1 = at::empty({n1}, in.options());
    tpucoll_desc d = desc(TPUCOLL_ALL_TO_ALL, hop1, got1, 0, coll_dtype(in));
    d.send_counts = s1.data();
    d.recv_counts = r1.data();
    local(c10d::OpType::ALLTOALL_BASE, d, {hop1, got1});
    // got1 holds, by source local rank m, the blocks for (0..H-1, l): regroup by host
    std::vector<int64_t> cur(L, 0), s2(H, 0), r2(H, 0);
    for (int m = 1; m < L; m++) cur[m] = cur[m - 1] + (int64_t)r1[m - 1];
    pieces.clear();
    for (int g = 0; g < H; g++)
      for (int m = 0; m < L; m++) {
        int64_t k = S(h * L + m, g * L + l);
        pieces.push_back(got1.narrow(0, cur[m], k));
        cur[m] += k;
        s2[g] += k;
        r2[g] += (int64_t)rc[g * L + m];
      }
    auto hop2 = cat_or_empty(pieces, in.options());
    auto dst = flat_out(out);
    host_ready(hop2);
    auto dst_cpu = cpu_alias(dst), hop2_cpu = cpu_alias(hop2);
    cross_->alltoall_base(dst_cpu, hop2_cpu, r2, s2, c10d::AllToAllOptions())->wait();
    return finish(c10d::OpType::ALLTOALL_BASE, out, dst, false);
  }

  // send/recv with a rank on another host: through the `peers` gloo group
  // (asynchronous, as gloo's), on the tensors' memory in place.
  c10::intrusive_ptr<c10d::Work> gloo_p2p(bool is_send, std::vector<at::Tensor>& ts, int peer, int tag) {
    TORCH_CHECK(peers_, "tpu_dist: send/recv between hosts needs the peers gloo group");
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    std::vector<at::Tensor> keep;
    std::vector<std::function<void()>> backs;
    for (auto& t : ts) check_tensor(t);
    for (auto& t : ts) {
      auto buf = is_send ? flat_in(t) : flat_out(t);
      host_ready(buf);
      std::vector<at::Tensor> v{cpu_alias(buf)};
      works.push_back(is_send ? peers_->send(v, peer, tag) : peers_->recv(v, peer, tag));
      keep.push_back(buf);
      if (!is_send)
        if (auto f = copy_back(buf, t)) backs.push_back(std::move(f));
    }
    std::function<void()> after;
    if (!backs.empty())
      after = [backs]() {
        for (auto& f : backs) f();
      };
    return c10::make_intrusive<AfterWork>(getRank(), is_send ? c10d::OpType::SEND : c10d::OpType::RECV,
                                          std::move(works), std::move(after), std::move(keep));
  }
};

void init_dist(py::module& m) {
  py::module::import("torch._C._distributed_c10d");
  py::class_<TpuBackend, c10d::Backend, c10::intrusive_ptr<TpuBackend>>(m, "_TpuDistBackend")
      .def("local_rank", [](TpuBackend&) { return 0; });
  m.def(
      "_tpu_dist_create",
      [](const std::string& name, int rank, int size, int local_rank, int local_size,
         size_t slot_bytes, int64_t timeout_ms, std::optional<c10::intrusive_ptr<c10d::Backend>> cross,
         std::optional<c10::intrusive_ptr<c10d::Backend>> peers) {
        tpucoll_comm* comm = nullptr;
        int rc;
        {
          NoGil nogil;
          rc = tpucoll_comm_init(name.c_str(), local_rank, local_size, slot_bytes, timeout_ms, &comm);
        }
        if (rc != TPU_OK) dist_error(rc, tpu_last_error());
        return c10::make_intrusive<TpuBackend>(rank, size, comm, local_rank, local_size,
                                               cross ? *cross : c10::intrusive_ptr<c10d::Backend>(),
                                               peers ? *peers : c10::intrusive_ptr<c10d::Backend>());
      },
      py::arg("name"), py::arg("rank"), py::arg("size"), py::arg("local_rank"),
      py::arg("local_size"), py::arg("slot_bytes"), py::arg("timeout_ms"), py::arg("cross") = py::none(),
      py::arg("peers") = py::none());
}

}  // namespace torch_tpu
