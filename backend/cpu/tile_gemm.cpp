#include "backend/cpu/tile_gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "backend/cpu/cpu_features.h"

namespace kiln::cpu {

template <>
bool tileGemmAvailable<float>() {
  return cpuHasAvx512();
}
template <>
bool tileGemmAvailable<BFloat16>() {
  static const bool ok = cpuHasAvx512() && __builtin_cpu_supports("avx512bf16");
  return ok;
}

namespace {

/// bf16 pairs along k as 32-bit words: (lo, hi) -> lo | hi << 16, the order
/// vdpbf16ps reads.
inline uint32_t pairWord(uint16_t lo, uint16_t hi) {
  return uint32_t{lo} | (uint32_t{hi} << 16);
}

/// Rows kk and kk + 1 of a B whose rows are contiguous (sn == 1) into one
/// packed pair-row: d[nn] = (s0[nn], s1[nn]). A plain loop the vectorizer
/// widens (the element-by-element stores at stride 2 ran one at a time).
KILN_SIMD_CLONES_512 void packPairRow(const uint16_t* s0, const uint16_t* s1, uint32_t* d, int64_t n) {
  if (s1)
    for (int64_t nn = 0; nn < n; ++nn) d[nn] = pairWord(s0[nn], s1[nn]);
  else
    for (int64_t nn = 0; nn < n; ++nn) d[nn] = pairWord(s0[nn], 0);
}

/// A transposed B (sk == 1: source row nn holds column nn along k): each
/// pair (kk, kk + 1) of a row is already one 32-bit word, copied to pair-row
/// kk / 2 of column nn (attention's K^T and V^T: 64 deep, a few hundred
/// keys).
/// Pair-row j of a transposed B: d[nn] = the word (s[2j], s[2j + 1]) of
/// source row nn. Contiguous stores; the strided loads become gathers in
/// the AVX-512 clone.
KILN_SIMD_CLONES_512 void packTransposedPairRow(const uint32_t* src, int64_t sn_words, uint32_t* d, int64_t n) {
  for (int64_t nn = 0; nn < n; ++nn) d[nn] = src[nn * sn_words];
}

void packTransposedPairs(const uint16_t* src, int64_t k, int64_t n, int64_t sn, uint32_t* d, int64_t row_words) {
  const int64_t pairs = k / 2;
  if (sn % 2 == 0 && reinterpret_cast<uintptr_t>(src) % 4 == 0) {  // every source pair is an aligned word
    const auto* s32 = reinterpret_cast<const uint32_t*>(src);
    for (int64_t j = 0; j < pairs; ++j) packTransposedPairRow(s32 + j, sn / 2, d + j * row_words, n);
  } else {
    for (int64_t nn = 0; nn < n; ++nn) {
      const uint16_t* s = src + nn * sn;
      for (int64_t j = 0; j < pairs; ++j) {
        uint32_t w;
        std::memcpy(&w, s + 2 * j, sizeof w);  // (s[2j], s[2j + 1]), little-endian
        d[j * row_words + nn] = w;
      }
    }
  }
  if (k % 2)
    for (int64_t nn = 0; nn < n; ++nn) d[pairs * row_words + nn] = pairWord(src[nn * sn + k - 1], 0);
}

}  // namespace

template <typename T>
void PackedB<T>::pack(const T* src, int64_t k_, int64_t n_, int64_t sk, int64_t sn) {
  k = k_;
  n = n_;
  n_pad = (n + 15) / 16 * 16;
  const int64_t groups = (k + kPair - 1) / kPair, group_len = n_pad * kPair;
  data.resize(static_cast<size_t>(groups * group_len));
  T* d = data.data();
  // Zeros where nothing is copied: the padding columns, and the missing
  // half of the last pair when k is odd.
  for (int64_t gi = 0; gi < groups; ++gi) std::fill(d + gi * group_len + n * kPair, d + (gi + 1) * group_len, T{});
  if (k % kPair)
    for (int64_t nn = 0; nn < n; ++nn) d[(groups - 1) * group_len + nn * kPair + 1] = T{};
  if constexpr (kPair == 2) {  // bf16: whole pairs as 32-bit words
    const auto* s16 = reinterpret_cast<const uint16_t*>(src);
    auto* d32 = reinterpret_cast<uint32_t*>(d);
    if (sn == 1) {
      for (int64_t gi = 0; gi < groups; ++gi) {
        const int64_t kk = 2 * gi;
        packPairRow(s16 + kk * sk, kk + 1 < k ? s16 + (kk + 1) * sk : nullptr, d32 + gi * n_pad, n);
      }
      return;
    }
    if (sk == 1) {
      packTransposedPairs(s16, k, n, sn, d32, n_pad);
      return;
    }
  }
  // Read the source along its contiguous direction.
  if (sn == 1 || sk != 1) {
    for (int64_t kk = 0; kk < k; ++kk) {
      T* row = d + (kk / kPair) * group_len + kk % kPair;
      const T* s = src + kk * sk;
      for (int64_t nn = 0; nn < n; ++nn) row[nn * kPair] = s[nn * sn];
    }
  } else {  // a transpose: each source row nn holds column nn of B
    for (int64_t nn = 0; nn < n; ++nn) {
      const T* s = src + nn * sn;
      T* col = d + nn * kPair;
      for (int64_t kk = 0; kk < k; ++kk) col[(kk / kPair) * group_len + kk % kPair] = s[kk];
    }
  }
}
template struct PackedB<float>;
template struct PackedB<BFloat16>;

namespace {

constexpr int kRows = 6;     // rows of accumulators per micro-kernel
constexpr int kVectors = 4;  // 16-float vectors of accumulators per row (64 columns)

/// The micro-kernels' common shape: MR x NV accumulators, the last vector
/// stored under `tail` (the columns that exist).
struct MicroArgs {
  const void* a;
  int64_t lda;
  const void* b;  // packed B at the block's first column
  int64_t b_stride;  // elements between consecutive k (f32) or k pairs (bf16) of B
  int64_t k;
  float* c;
  int64_t ldc;
  __mmask16 tail;
  bool accumulate;
};

template <int MR, int NV>
[[gnu::target("avx512f")]] [[gnu::always_inline]] inline void storeTile(__m512 (&acc)[MR][NV], const MicroArgs& m) {
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    float* c = m.c + r * m.ldc;
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      const __mmask16 mask = v == NV - 1 ? m.tail : __mmask16(0xffff);
      __m512 x = acc[r][v];
      if (m.accumulate) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(mask, c + 16 * v));
      _mm512_mask_storeu_ps(c + 16 * v, mask, x);
    }
  }
}

template <int MR, int NV>
[[gnu::target("avx512f")]] [[gnu::always_inline]] inline void zeroTile(__m512 (&acc)[MR][NV]) {
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
}

template <int MR, int NV>
[[gnu::target("avx512f")]] void microF32(const MicroArgs& m) {
  const float* a = static_cast<const float*>(m.a);
  const float* b = static_cast<const float*>(m.b);
  __m512 acc[MR][NV];
  zeroTile<MR, NV>(acc);
  for (int64_t kk = 0; kk < m.k; ++kk) {
    const float* bk = b + kk * m.b_stride;
    __m512 bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = _mm512_loadu_ps(bk + 16 * v);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const __m512 av = _mm512_set1_ps(a[r * m.lda + kk]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
    }
  }
  storeTile<MR, NV>(acc, m);
}

/// One step of k pairs (2p, 2p + 1): B's 16 pairs per vector, A's pair as
/// one broadcast 32-bit lane; past an odd k only A's low half (B's missing
/// half is zero, so the product adds nothing).
template <int MR, int NV, bool OddTail>
[[gnu::target("avx512f,avx512bf16")]] [[gnu::always_inline]] inline void bf16Step(__m512 (&acc)[MR][NV],
                                                                                   const uint16_t* a, int64_t lda,
                                                                                   const uint16_t* bp, int64_t p) {
  __m512bh bv[NV];
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v) bv[v] = (__m512bh)_mm512_loadu_si512(bp + 32 * v);
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    uint32_t pair;
    if constexpr (OddTail)
      pair = a[r * lda + 2 * p];
    else
      std::memcpy(&pair, a + r * lda + 2 * p, sizeof pair);
    const __m512bh av = (__m512bh)_mm512_set1_epi32(static_cast<int>(pair));
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], av, bv[v]);
  }
}

template <int MR, int NV>
[[gnu::target("avx512f,avx512bf16")]] void microBf16(const MicroArgs& m) {
  const uint16_t* a = static_cast<const uint16_t*>(m.a);
  const uint16_t* b = static_cast<const uint16_t*>(m.b);
  __m512 acc[MR][NV];
  zeroTile<MR, NV>(acc);
  const int64_t pairs = m.k / 2;
  for (int64_t p = 0; p < pairs; ++p) bf16Step<MR, NV, false>(acc, a, m.lda, b + p * m.b_stride, p);
  if (m.k % 2) bf16Step<MR, NV, true>(acc, a, m.lda, b + pairs * m.b_stride, pairs);
  storeTile<MR, NV>(acc, m);
}

using Micro = void (*)(const MicroArgs&);

template <bool Bf16, int... I>
constexpr std::array<Micro, sizeof...(I)> makeTable(std::integer_sequence<int, I...>) {
  if constexpr (Bf16)
    return {&microBf16<I / kVectors + 1, I % kVectors + 1>...};
  else
    return {&microF32<I / kVectors + 1, I % kVectors + 1>...};
}

/// micro<MR, NV> at [(MR - 1) * kVectors + NV - 1].
template <bool Bf16>
constexpr auto kMicro = makeTable<Bf16>(std::make_integer_sequence<int, kRows * kVectors>{});

template <bool Bf16, typename T>
void tileGemmImpl(const T* a, int64_t lda, const PackedB<T>& b, int64_t m, int64_t n, int64_t k, float* c,
                  int64_t ldc, bool accumulate) {
  constexpr int64_t P = PackedB<T>::kPair;
  const int64_t b_stride = b.n_pad * P;
  for (int64_t n0 = 0; n0 < n; n0 += 16 * kVectors) {
    const int64_t cols = std::min<int64_t>(16 * kVectors, n - n0);
    const int nv = static_cast<int>((cols + 15) / 16);
    const int last = static_cast<int>(cols - 16 * (nv - 1));
    const __mmask16 tail = static_cast<__mmask16>(last == 16 ? 0xffff : (1u << last) - 1);
    for (int64_t m0 = 0; m0 < m; m0 += kRows) {
      const int mr = static_cast<int>(std::min<int64_t>(kRows, m - m0));
      const MicroArgs args{a + m0 * lda, lda, b.data.data() + n0 * P, b_stride, k, c + m0 * ldc + n0, ldc, tail,
                           accumulate};
      kMicro<Bf16>[static_cast<size_t>((mr - 1) * kVectors + nv - 1)](args);
    }
  }
}

}  // namespace

void tileGemm(const float* a, int64_t lda, const PackedB<float>& b, int64_t m, int64_t n, int64_t k, float* c,
              int64_t ldc, bool accumulate) {
  tileGemmImpl<false>(a, lda, b, m, n, k, c, ldc, accumulate);
}
void tileGemm(const BFloat16* a, int64_t lda, const PackedB<BFloat16>& b, int64_t m, int64_t n, int64_t k, float* c,
              int64_t ldc, bool accumulate) {
  tileGemmImpl<true>(a, lda, b, m, n, k, c, ldc, accumulate);
}

}  // namespace kiln::cpu
