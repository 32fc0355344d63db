// Load: N concurrent clients (default 32), each its own tensord::Client over
// loopback to one real Server with two host devices, doing random seeded
// create / add / mul / matmul / sum / To / fetch / release sequences for a
// bounded time. Every result is checked against a CPU reference computed
// here with plain loops (values are small integers, so float32 results are
// exact); injected errors (operands on different devices, shapes that do
// not broadcast or multiply, reduction dims out of range) must fail with
// the right code. At the end, with every client gone, each device's held
// memory and live tensors must be back to zero.
//
//   load_test [--clients 32] [--seconds 20] [--seed 1]
//
// Prints one summary line ("load: ...") and exits 0 on success.
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "server/server.h"
#include "tensord/client.h"

namespace {

using tensord::client::Client;
using tensord::client::DType;
using tensord::client::Error;
using tensord::client::StatusCode;
using tensord::client::Tensor;

using Shape = std::vector<int64_t>;

// Magnitude cap for values kept in a client's pool: products of two stay
// below 2^24 after sums of up to 8 terms, so float32 is exact.
constexpr double kMaxPooled = 1000;

struct Ref {
  DType dtype = DType::kInt64;  // kInt64 or kFloat32
  Shape shape;
  std::vector<double> v;
  std::string device;
};

struct Entry {
  Tensor t;
  Ref ref;
};

int64_t Numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::optional<Shape> Broadcast(const Shape& a, const Shape& b) {
  const size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1) return std::nullopt;
    out[i] = std::max(da, db);
  }
  return out;
}

// Flat index into `s` (broadcast from `out`) of the element at out-index
// `flat`.
int64_t BroadcastIndex(const Shape& out, const Shape& s, int64_t flat) {
  int64_t idx = 0, stride = 1;
  for (size_t k = out.size(); k-- > 0;) {
    const int64_t coord = flat % out[k];
    flat /= out[k];
    const size_t off = out.size() - s.size();
    if (k >= off) {
      const int64_t d = s[k - off];
      idx += (d == 1 ? 0 : coord) * stride;
      stride *= d;
    }
  }
  return idx;
}

double MaxAbs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

struct Totals {
  std::atomic<uint64_t> requests{0};
  std::atomic<uint64_t> checked{0};
  std::atomic<uint64_t> injected{0};
  std::atomic<uint64_t> cross_device{0};
  std::atomic<uint64_t> bad_shape{0};
  std::atomic<uint64_t> bad_dim{0};
  std::atomic<uint64_t> failures{0};
};

class Worker {
 public:
  Worker(const std::string& address, uint64_t seed, Totals* totals)
      : client_(address), rng_(seed), totals_(totals) {
    ++totals_->requests;  // OpenSession
  }

  void Run(std::chrono::steady_clock::time_point deadline) {
    while (std::chrono::steady_clock::now() < deadline) {
      try {
        Step();
      } catch (const Error& e) {
        Fail("unexpected error: " + std::string(e.what()));
      } catch (const std::exception& e) {
        Fail("unexpected exception: " + std::string(e.what()));
      }
    }
    pool_.clear();  // releases
  }

 private:
  int Rand(int lo, int hi) {  // [lo, hi]
    return std::uniform_int_distribution<int>(lo, hi)(rng_);
  }
  std::string Device() { return Rand(0, 1) == 0 ? "cpu:0" : "cpu:1"; }

  void Fail(const std::string& why) {
    if (totals_->failures.fetch_add(1) < 20) {
      std::fprintf(stderr, "load: FAIL: %s\n", why.c_str());
    }
  }

  Shape RandomShape() {
    switch (Rand(0, 3)) {
      case 0:
        return {Rand(1, 8)};
      case 1:
        return {};
      default:
        return {Rand(1, 8), Rand(1, 8)};
    }
  }

  Entry Create(Shape shape, DType dtype, const std::string& device) {
    Ref ref{dtype, shape, {}, device};
    const int64_t n = Numel(shape);
    for (int64_t i = 0; i < n; ++i) ref.v.push_back(Rand(-4, 4));
    ++totals_->requests;
    if (dtype == DType::kFloat32) {
      std::vector<float> f(ref.v.begin(), ref.v.end());
      return {client_.tensor<float>(f, shape, device), ref};
    }
    std::vector<int64_t> i(ref.v.begin(), ref.v.end());
    return {client_.tensor<int64_t>(i, shape, device), ref};
  }

  // Fetches `e` and compares with its reference.
  void Check(const Entry& e, const char* what) {
    ++totals_->requests;
    std::vector<double> got;
    if (e.ref.dtype == DType::kFloat32) {
      for (float f : e.t.fetch<float>()) got.push_back(f);
    } else {
      for (int64_t i : e.t.fetch<int64_t>())
        got.push_back(static_cast<double>(i));
    }
    ++totals_->checked;
    if (e.t.shape() != e.ref.shape || e.t.device().str() != e.ref.device ||
        e.t.dtype() != e.ref.dtype) {
      Fail(std::string(what) + ": metadata differs from the reference");
      return;
    }
    if (got != e.ref.v) {
      Fail(std::string(what) + ": values differ from the reference");
    }
  }

  // Runs `op`, which must fail with one of `codes` (an injected error).
  template <typename Op>
  void ExpectError(Op&& op, std::set<StatusCode> codes, const char* what) {
    ++totals_->requests;
    ++totals_->injected;
    try {
      op();
      Fail(std::string(what) + ": succeeded, expected an error");
    } catch (const Error& e) {
      if (codes.count(e.code()) == 0) {
        Fail(std::string(what) + ": wrong code: " + e.what());
      }
    }
  }

  void Keep(Entry e) {
    if (MaxAbs(e.ref.v) > kMaxPooled) return;
    if (pool_.size() >= 8) {
      ++totals_->requests;  // the evicted tensor's release
      pool_.erase(pool_.begin() + Rand(0, 7));
    }
    pool_.push_back(std::move(e));
  }

  Entry& Pick() { return pool_[Rand(0, static_cast<int>(pool_.size()) - 1)]; }

  void Step() {
    if (pool_.size() < 2) {
      Keep(Create(RandomShape(), Rand(0, 1) ? DType::kFloat32 : DType::kInt64,
                  Device()));
      return;
    }
    switch (Rand(0, 9)) {
      case 0:
        Keep(Create(RandomShape(), Rand(0, 1) ? DType::kFloat32 : DType::kInt64,
                    Device()));
        break;
      case 1:
      case 2:
        Binary();
        break;
      case 3:
      case 4:
        MatMul();
        break;
      case 5:
        Sum();
        break;
      case 6:
        To();
        break;
      case 7:
        Check(Pick(), "fetch");
        break;
      default:  // release (the remote release happens with the last copy)
        ++totals_->requests;
        pool_.erase(pool_.begin() +
                    Rand(0, static_cast<int>(pool_.size()) - 1));
        break;
    }
  }

  void Binary() {
    const bool mul = Rand(0, 1) == 1;
    Entry a = Pick();
    // Mostly a fitting partner; sometimes whatever the pool holds.
    Entry b =
        Rand(0, 2) == 0
            ? Pick()
            : Create(a.ref.shape, Rand(0, 1) ? DType::kFloat32 : DType::kInt64,
                     a.ref.device);
    const auto shape = Broadcast(a.ref.shape, b.ref.shape);
    const bool same_device = a.ref.device == b.ref.device;
    auto run = [&] { return mul ? a.t * b.t : a.t + b.t; };
    if (!same_device || !shape) {
      std::set<StatusCode> codes;
      if (!same_device) {
        codes.insert(StatusCode::FAILED_PRECONDITION);
        ++totals_->cross_device;
      }
      if (!shape) {
        codes.insert(StatusCode::INVALID_ARGUMENT);
        ++totals_->bad_shape;
      }
      ExpectError(run, codes, mul ? "mul" : "add");
      return;
    }
    ++totals_->requests;
    Entry out{run(), {}};
    out.ref.dtype =
        (a.ref.dtype == DType::kFloat32 || b.ref.dtype == DType::kFloat32)
            ? DType::kFloat32
            : DType::kInt64;
    out.ref.shape = *shape;
    out.ref.device = a.ref.device;
    const int64_t n = Numel(*shape);
    for (int64_t i = 0; i < n; ++i) {
      const double x = a.ref.v[BroadcastIndex(*shape, a.ref.shape, i)];
      const double y = b.ref.v[BroadcastIndex(*shape, b.ref.shape, i)];
      out.ref.v.push_back(mul ? x * y : x + y);
    }
    if (Rand(0, 1) == 0) Check(out, mul ? "mul" : "add");
    Keep(std::move(out));
  }

  void MatMul() {
    Entry a = Pick();
    if (a.ref.shape.size() != 2) {
      a = Create({Rand(1, 8), Rand(1, 8)}, a.ref.dtype, a.ref.device);
    }
    const int64_t m = a.ref.shape[0], k = a.ref.shape[1];
    switch (Rand(0, 5)) {
      case 0: {  // the other device
        Entry b = Create({k, Rand(1, 8)}, a.ref.dtype,
                         a.ref.device == "cpu:0" ? "cpu:1" : "cpu:0");
        ++totals_->cross_device;
        ExpectError([&] { return a.t.matmul(b.t); },
                    {StatusCode::FAILED_PRECONDITION}, "matmul cross-device");
        return;
      }
      case 1: {  // inner dims that do not match
        Entry b =
            Create({k + Rand(1, 3), Rand(1, 8)}, a.ref.dtype, a.ref.device);
        ++totals_->bad_shape;
        ExpectError([&] { return a.t.matmul(b.t); },
                    {StatusCode::INVALID_ARGUMENT}, "matmul bad shapes");
        return;
      }
      default:
        break;
    }
    Entry b = Create({k, Rand(1, 8)}, a.ref.dtype, a.ref.device);
    const int64_t n = b.ref.shape[1];
    ++totals_->requests;
    Entry out{a.t.matmul(b.t), {a.ref.dtype, {m, n}, {}, a.ref.device}};
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p)
          s += a.ref.v[i * k + p] * b.ref.v[p * n + j];
        out.ref.v.push_back(s);
      }
    }
    Check(out, "matmul");
    Keep(std::move(out));
  }

  void Sum() {
    Entry a = Pick();
    const int64_t rank = static_cast<int64_t>(a.ref.shape.size());
    if (Rand(0, 2) == 0) {  // over everything
      ++totals_->requests;
      Entry out{a.t.sum(), {a.ref.dtype, {}, {0}, a.ref.device}};
      for (double x : a.ref.v) out.ref.v[0] += x;
      Check(out, "sum");
      Keep(std::move(out));
      return;
    }
    const int64_t dim =
        Rand(static_cast<int>(-rank - 1), static_cast<int>(rank));
    const bool valid =
        rank == 0 ? (dim == 0 || dim == -1) : (dim >= -rank && dim < rank);
    if (!valid) {
      ++totals_->bad_dim;
      ExpectError([&] { return a.t.sum(dim); }, {StatusCode::INVALID_ARGUMENT},
                  "sum bad dim");
      return;
    }
    ++totals_->requests;
    Entry out{a.t.sum(dim), {a.ref.dtype, {}, {}, a.ref.device}};
    if (rank == 0) {
      out.ref.v = a.ref.v;
    } else {
      const int64_t d = dim < 0 ? dim + rank : dim;
      int64_t outer = 1, inner = 1;
      for (int64_t i = 0; i < d; ++i) outer *= a.ref.shape[i];
      for (int64_t i = d + 1; i < rank; ++i) inner *= a.ref.shape[i];
      const int64_t len = a.ref.shape[d];
      for (int64_t i = 0; i < rank; ++i) {
        if (i != d) out.ref.shape.push_back(a.ref.shape[i]);
      }
      for (int64_t o = 0; o < outer; ++o) {
        for (int64_t in = 0; in < inner; ++in) {
          double s = 0;
          for (int64_t l = 0; l < len; ++l)
            s += a.ref.v[(o * len + l) * inner + in];
          out.ref.v.push_back(s);
        }
      }
    }
    Check(out, "sum(dim)");
    Keep(std::move(out));
  }

  void To() {
    Entry& a = Pick();
    const std::string target = Device();
    ++totals_->requests;
    Entry out{a.t.to(target), a.ref};
    out.ref.device = target;
    if ((target == a.ref.device) != out.t.is(a.t)) {
      Fail("To: same-device move must return the same tensor, else a new one");
    }
    if (Rand(0, 1) == 0) Check(out, "to");
    Keep(std::move(out));
  }

  Client client_;
  std::mt19937_64 rng_;
  Totals* totals_;
  std::vector<Entry> pool_;
};

}  // namespace

int main(int argc, char** argv) {
  int clients = 32;
  double seconds = 20;
  uint64_t seed = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 < argc && a == "--clients")
      clients = std::atoi(argv[++i]);
    else if (i + 1 < argc && a == "--seconds")
      seconds = std::atof(argv[++i]);
    else if (i + 1 < argc && a == "--seed")
      seed = std::strtoull(argv[++i], nullptr, 10);
    else {
      std::fprintf(stderr, "usage: %s [--clients N] [--seconds S] [--seed N]\n",
                   argv[0]);
      return 2;
    }
  }
  // Every injected error would log a line.
  spdlog::set_level(spdlog::level::warn);

  tensord::server::ServerOptions options;
  options.listen = "127.0.0.1:0";
  options.runtime.host_devices = 2;
  options.runtime.host_memory_budget = uint64_t{512} << 20;
  auto server = tensord::server::Server::Start(std::move(options));
  if (!server.ok()) {
    std::fprintf(stderr, "load: server: %s\n",
                 server.status().ToString().c_str());
    return 1;
  }
  const std::string address = (*server)->address();

  Totals totals;
  const auto start = std::chrono::steady_clock::now();
  const auto deadline =
      start + std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      try {
        Worker w(address, seed * 1000003 + static_cast<uint64_t>(c), &totals);
        w.Run(deadline);
      } catch (const std::exception& e) {
        ++totals.failures;
        std::fprintf(stderr, "load: FAIL: client %d: %s\n", c, e.what());
      }
      ++totals.requests;  // CloseSession
    });
  }
  for (std::thread& t : threads) t.join();
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();

  // Every client is gone: nothing may be held anywhere.
  uint64_t leaked = 0, live = 0;
  {
    Client observer(address);
    for (const auto& d : observer.devices()) {
      leaked += d.held_memory;
      live += d.live_tensors;
      if (d.held_memory != 0 || d.live_tensors != 0) {
        std::fprintf(
            stderr, "load: FAIL: %s still holds %llu bytes in %llu tensors\n",
            d.name.c_str(), static_cast<unsigned long long>(d.held_memory),
            static_cast<unsigned long long>(d.live_tensors));
      }
    }
  }
  std::printf(
      "load: clients=%d seconds=%.1f requests=%llu requests/s=%.0f "
      "checked_results=%llu errors_injected=%llu (cross_device=%llu "
      "bad_shape=%llu bad_dim=%llu) failures=%llu live_tensors_left=%llu "
      "bytes_leaked=%llu\n",
      clients, elapsed, static_cast<unsigned long long>(totals.requests.load()),
      totals.requests.load() / elapsed,
      static_cast<unsigned long long>(totals.checked.load()),
      static_cast<unsigned long long>(totals.injected.load()),
      static_cast<unsigned long long>(totals.cross_device.load()),
      static_cast<unsigned long long>(totals.bad_shape.load()),
      static_cast<unsigned long long>(totals.bad_dim.load()),
      static_cast<unsigned long long>(totals.failures.load()),
      static_cast<unsigned long long>(live),
      static_cast<unsigned long long>(leaked));
  (*server)->Shutdown();
  const bool ok = totals.failures.load() == 0 && leaked == 0 && live == 0 &&
                  totals.checked.load() > 0;
  std::printf("load: %s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
