// Which prefill calls the Hopper kernel's TMA producer takes (PrefillUsesTmaKv), without a GPU:
// the Hopper kernel only, ragged K/V or pages of 8 positions and up, rows or pages a TMA
// coordinate can name, strides TMA can step, and the diagnostic control KILN_PREFILL_TMA_KV (through its testing
// override). The maps themselves are encoded by the driver: gpu_prefill_test.cpp runs both producers.
#include <catch2/catch.hpp>

#include <climits>

#include "client/ops/prefill/prefill_tensor_maps.h"
#include "kiln/prefill/prefill_contract.h"

namespace {

using kiln::client::PrefillUsesTmaKv;
using kiln::client::SetPrefillTmaKvForTesting;

// Dense ragged k and v: 1000 rows of 8 heads of 128.
kiln::prefill::KilnBatchPrefillParams Dense() {
  kiln::prefill::KilnBatchPrefillParams p = {};
  p.total_kv = 1000;
  p.num_kv_heads = 8;
  p.k_stride_token = p.v_stride_token = 8 * 128;
  p.k_stride_head = p.v_stride_head = 128;
  return p;
}

struct ForceTma {
  explicit ForceTma(int on) { SetPrefillTmaKvForTesting(on); }
  ~ForceTma() { SetPrefillTmaKvForTesting(-1); }
};

// A paged cache of 500 pages of 16 positions x 8 heads x 128, K and V pages interleaved.
kiln::prefill::KilnBatchPrefillParams Paged() {
  kiln::prefill::KilnBatchPrefillParams p = {};
  p.total_kv = 500;
  p.num_kv_heads = 8;
  p.k_stride_token = p.v_stride_token = 2 * 16 * 8 * 128;
  return p;
}

TEST_CASE("the prefill TMA producer serves the Hopper kernel, ragged or pages of 8 and up", "[client][prefill]") {
  const ForceTma on(1);
  const int hopper = kiln::prefill::kSm90TileRows, mma = kiln::prefill::kTileRows;
  CHECK(PrefillUsesTmaKv(false, 0, hopper, Dense()));
  CHECK_FALSE(PrefillUsesTmaKv(false, 0, mma, Dense()));  // the mma.sync kernel has no producer
  for (const int page : {8, 16, 64, 128, 256}) {
    INFO("page " << page);
    CHECK(PrefillUsesTmaKv(true, page, hopper, Paged()));
    CHECK_FALSE(PrefillUsesTmaKv(true, page, mma, Paged()));
  }
  for (const int page : {1, 2, 4}) {
    INFO("page " << page);  // a TMA load per page would be more than a warp's lanes
    CHECK_FALSE(PrefillUsesTmaKv(true, page, hopper, Paged()));
  }
}

TEST_CASE("the paged TMA producer needs page coordinates and a page stride a tensor map can hold",
          "[client][prefill]") {
  const ForceTma on(1);
  const int hopper = kiln::prefill::kSm90TileRows;
  auto p = Paged();
  p.total_kv = INT_MAX - 1;
  CHECK(PrefillUsesTmaKv(true, 16, hopper, p));
  p.total_kv = INT_MAX;  // coordinate total_kv names an invalid page: it must fit an int
  CHECK_FALSE(PrefillUsesTmaKv(true, 16, hopper, p));
  p = Paged();
  p.k_stride_token = 0;
  CHECK_FALSE(PrefillUsesTmaKv(true, 16, hopper, p));
  p = Paged();
  p.v_stride_token = 1ll << 39;
  CHECK_FALSE(PrefillUsesTmaKv(true, 16, hopper, p));
  p = Paged();
  p.total_kv = 1;  // one page: its stride is never stepped over
  p.k_stride_token = p.v_stride_token = 0;
  CHECK(PrefillUsesTmaKv(true, 16, hopper, p));
}

TEST_CASE("the prefill TMA producer needs rows and strides a tensor map can hold", "[client][prefill]") {
  const ForceTma on(1);
  const int hopper = kiln::prefill::kSm90TileRows;
  auto p = Dense();
  p.total_kv = INT_MAX;
  CHECK(PrefillUsesTmaKv(false, 0, hopper, p));
  p.total_kv = static_cast<long long>(INT_MAX) + 1;  // a row coordinate past int32
  CHECK_FALSE(PrefillUsesTmaKv(false, 0, hopper, p));
  p.total_kv = 0;
  CHECK_FALSE(PrefillUsesTmaKv(false, 0, hopper, p));

  p = Dense();
  p.v_stride_token = 0;  // a broadcast row: TMA strides are positive
  CHECK_FALSE(PrefillUsesTmaKv(false, 0, hopper, p));
  p = Dense();
  p.k_stride_head = 4;  // not a multiple of 16 bytes
  CHECK_FALSE(PrefillUsesTmaKv(false, 0, hopper, p));
  p = Dense();
  p.k_stride_token = 1ll << 39;  // 2^40 bytes: past what a tensor map holds
  CHECK_FALSE(PrefillUsesTmaKv(false, 0, hopper, p));

  // One head, one row: the stride never stepped over may be anything.
  p = Dense();
  p.num_kv_heads = 1;
  p.k_stride_head = p.v_stride_head = 0;
  CHECK(PrefillUsesTmaKv(false, 0, hopper, p));
  p = Dense();
  p.total_kv = 1;
  p.k_stride_token = p.v_stride_token = 3;
  CHECK(PrefillUsesTmaKv(false, 0, hopper, p));
}

TEST_CASE("KILN_PREFILL_TMA_KV off sends K/V through cp.async", "[client][prefill]") {
  const int hopper = kiln::prefill::kSm90TileRows;
  {
    const ForceTma off(0);
    CHECK_FALSE(PrefillUsesTmaKv(false, 0, hopper, Dense()));
    CHECK_FALSE(PrefillUsesTmaKv(true, 16, hopper, Paged()));
  }
  const ForceTma on(1);
  CHECK(PrefillUsesTmaKv(false, 0, hopper, Dense()));
}

TEST_CASE("a prefill TMA box holds a K/V tile's rows, or a page's up to a tile", "[client][prefill]") {
  using kiln::prefill::PrefillTmaBoxRows;
  CHECK(PrefillTmaBoxRows(0) == kiln::prefill::kSm90TileKv);  // ragged
  CHECK(PrefillTmaBoxRows(8) == 8);
  CHECK(PrefillTmaBoxRows(16) == 16);
  CHECK(PrefillTmaBoxRows(128) == 128);
  CHECK(PrefillTmaBoxRows(256) == 128);  // a page that holds tiles: a tile's rows at a time
}

}  // namespace
