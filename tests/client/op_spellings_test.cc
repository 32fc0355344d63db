// Every row of the op table (proto/tensord/v1/ops.json) spelled as the C++
// client spells it (the row's `cpp`), run through a real in-process
// tensord on the row's example inputs. The spellings are generated into
// op_spellings.inc (core/base/gen_op_table.py): a row whose spelling the client
// lacks fails the build, and a client op whose row has no spelling, or
// whose spelling fails, fails here. Values against PyTorch are
// tests/python/client/test_op_table.py's.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "core/base/op_table.h"
#include "server/server.h"
#include "tensord/client.h"
#include "tests/client/in_process_fixture.h"

namespace tensord {
namespace {

using client::Client;
using client::Tensor;

std::mt19937_64& Rng() {
  static std::mt19937_64 rng(32);
  return rng;
}

int64_t Count(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

// float64 values uniform in [lo, hi), requiring grad when `grad`.
Tensor Float(const Client& c, std::vector<int64_t> dims, double lo, double hi,
             bool grad) {
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(Count(dims));
  for (double& x : v) x = u(Rng());
  Tensor t = c.tensor(v, std::move(dims));
  if (grad) t.requires_grad_();
  return t;
}
// int64 class indices in [0, high).
Tensor Ints(const Client& c, std::vector<int64_t> dims, int64_t high) {
  std::uniform_int_distribution<int64_t> u(0, high - 1);
  std::vector<int64_t> v(Count(dims));
  for (int64_t& x : v) x = u(Rng());
  return c.tensor(v, std::move(dims));
}
Tensor Bools(const Client& c, std::vector<int64_t> dims) {
  return Float(c, std::move(dims), -1, 1, false).gt(0.0);
}

// Runs `spell` and waits for what it sent: a tensor result is fetched.
template <typename F>
void Consume(F spell) {
  using R = std::invoke_result_t<F>;
  if constexpr (std::is_void_v<R>) {
    spell();
  } else if constexpr (std::is_same_v<std::decay_t<R>, Tensor>) {
    (void)spell().fetch_bytes();
  } else {  // std::optional<Tensor>: grad()
    auto grad = spell();
    ASSERT_TRUE(grad.has_value());
    (void)grad->fetch_bytes();
  }
}

struct Spelling {
  std::string_view id;
  void (*run)(const Client& c);
};

#include "tests/op_spellings.inc"  // generated: Spell_<id>, kSpellings

class OpSpellingsTest : public InProcessClientTest {
 protected:
  OpSpellingsTest() : InProcessClientTest("tensord-spellings-") {}
};

TEST_F(OpSpellingsTest, EveryClientRowRunsAsTheCppClientSpellsIt) {
  for (const core::OpRow& row : core::OpRows()) {
    if (row.plan.empty()) continue;  // not a client op (move_to)
    SCOPED_TRACE(std::string(row.id));
    const Spelling* spelling = nullptr;
    for (const Spelling& s : kSpellings) {
      if (s.id == row.id) spelling = &s;
    }
    ASSERT_NE(spelling, nullptr) << "the row has no C++ spelling (`cpp`)";
    EXPECT_NO_THROW(spelling->run(*client_)) << row.cpp;
  }
}

}  // namespace
}  // namespace tensord
