// The orders in which topk leaves tied values (core/ops/reduction.cpp's
// `ties` attribute), one row at a time. Which of two equal values comes
// first decides which index a gradient reaches, so a selection PyTorch
// makes by an unstable algorithm is made here by the same algorithm:
//   stable    the lower index first (torch.sort(stable=True)).
//   topk      PyTorch's CPU torch.topk (aten's topk_impl_loop):
//             std::partial_sort of (value, index) pairs when k * 64 <= n,
//             else std::nth_element at k-1 and std::sort of the k-1 before
//             it, under a comparison of values alone (NaN above numbers).
//   kthvalue  PyTorch's CPU torch.kthvalue: the median-of-three quickselect
//             of Sedgewick's "Implementing Quicksort Programs" (1978) that
//             aten carries over from TH, which leaves the k-th smallest at
//             k-1 and the k-1 smaller before it in the order its swaps give.
// The libstdc++ algorithms are the ones libtorch is compiled with, so the
// same row gives the same order.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

namespace kiln::cpu {

enum class TopkTies { Stable, Topk, Kthvalue };

template <class C>
bool isNanValue(C v) {
  if constexpr (std::is_floating_point_v<C>)
    return std::isnan(v);
  else
    return false;
}

/// PyTorch's order of values alone: a before b when a is better (NaN best
/// when largest, worst when smallest).
template <class C>
bool valueBefore(C a, C b, bool largest) {
  const bool an = isNanValue(a), bn = isNanValue(b);
  return largest ? (an && !bn) || a > b : (!an && bn) || a < b;
}

/// Orders row (value, index pairs, indices 0..n-1 in order) so that its
/// first k entries are the k best in the order `ties` names.
template <class C>
void orderTopk(std::vector<std::pair<C, int64_t>>& row, int64_t k, bool largest, TopkTies ties) {
  using E = std::pair<C, int64_t>;
  const int64_t n = static_cast<int64_t>(row.size());
  if (k == 0) return;
  if (ties == TopkTies::Stable) {
    std::partial_sort(row.begin(), row.begin() + k, row.end(), [largest](const E& a, const E& b) {
      if (valueBefore(a.first, b.first, largest)) return true;
      if (valueBefore(b.first, a.first, largest)) return false;
      return a.second < b.second;  // equal, or both NaN
    });
    return;
  }
  auto before = [largest](const E& a, const E& b) { return valueBefore(a.first, b.first, largest); };
  if (ties == TopkTies::Topk) {
    if (k * 64 <= n) {
      std::partial_sort(row.begin(), row.begin() + k, row.end(), before);
    } else {
      std::nth_element(row.begin(), row.begin() + (k - 1), row.end(), before);
      std::sort(row.begin(), row.begin() + (k - 1), before);
    }
    return;
  }
  // Kthvalue: quickselect of the (k-1)-th position under "x after y" =
  // valueBefore(y, x) for the smallest first (NaN counts as the largest).
  auto after = [](const E& x, const E& y) { return valueBefore(y.first, x.first, false); };
  const int64_t target = k - 1;
  int64_t lo = 0, hi = n - 1;
  while (hi > lo) {
    if (hi == lo + 1) {
      if (after(row[lo], row[hi])) std::swap(row[lo], row[hi]);
      return;
    }
    // Median of three: row[lo + 1] <= row[lo] <= row[hi], the pivot at lo.
    std::swap(row[(lo + hi) >> 1], row[lo + 1]);
    if (after(row[lo + 1], row[hi])) std::swap(row[lo + 1], row[hi]);
    if (after(row[lo], row[hi])) std::swap(row[lo], row[hi]);
    if (after(row[lo + 1], row[lo])) std::swap(row[lo + 1], row[lo]);
    const E pivot = row[lo];
    int64_t i = lo + 1, j = hi;
    while (true) {
      do ++i;
      while (after(pivot, row[i]));
      do --j;
      while (after(row[j], pivot));
      if (j < i) break;
      std::swap(row[i], row[j]);
    }
    std::swap(row[lo], row[j]);
    if (j <= target) lo = i;
    if (j >= target) hi = j - 1;
  }
}

}  // namespace kiln::cpu
