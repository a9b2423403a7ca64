#include "backend/cpu/group_norm_channels_last.h"

#include <cmath>
#include <vector>

#include "backend/cpu/batch_norm_rows.h"
#include "backend/cpu/cpu_loops.h"

namespace kiln::cpu {
namespace {

/// One sample's statistics, per channel: its group's mean and 1 / std.
template <typename T>
void groupStats(const T* x, int64_t rows, int64_t channels, int64_t groups, double eps, std::vector<double>& mean,
                std::vector<double>& rstd) {
  std::vector<double> m, v;
  rowsMoments(x, rows, channels, m, v);
  const int64_t per = channels / groups;
  mean.resize(static_cast<size_t>(channels));
  rstd.resize(static_cast<size_t>(channels));
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t c0 = g * per, c1 = c0 + per;
    double mg = 0, vg = 0;
    for (int64_t c = c0; c < c1; ++c) mg += m[c];
    mg /= static_cast<double>(per);
    for (int64_t c = c0; c < c1; ++c) vg += v[c] + (m[c] - mg) * (m[c] - mg);
    const double r = 1.0 / std::sqrt(vg / static_cast<double>(per) + eps);
    for (int64_t c = c0; c < c1; ++c) mean[c] = mg, rstd[c] = r;
  }
}

}  // namespace

template <typename T>
void groupNormChannelsLast(const T* x, const T* weight, const T* bias, T* y, int64_t batch, int64_t rows,
                           int64_t channels, int64_t groups, double eps) {
  std::vector<double> mean, rstd;
  std::vector<T> scale(static_cast<size_t>(channels)), shift(static_cast<size_t>(channels));
  for (int64_t n = 0; n < batch; ++n) {
    const int64_t off = n * rows * channels;
    groupStats(x + off, rows, channels, groups, eps, mean, rstd);
    for (int64_t c = 0; c < channels; ++c) {
      scale[c] = static_cast<T>(rstd[c] * weight[c]);
      shift[c] = static_cast<T>(bias[c] - mean[c] * rstd[c] * weight[c]);
    }
    rowsAffine(x + off, y + off, rows, channels, scale.data(), shift.data());
  }
}

template <typename T>
void groupNormBackwardChannelsLast(const T* g, const T* x, const T* weight, T* gx, T* gw, T* gb, int64_t batch,
                                   int64_t rows, int64_t channels, int64_t groups, double eps) {
  const int64_t per = channels / groups;
  const double size = static_cast<double>(per * rows);
  std::vector<double> mean, rstd, sum_g, dot, acc_w(static_cast<size_t>(channels), 0.0),
      acc_b(static_cast<size_t>(channels), 0.0);
  // Per channel, its group's values in T: mean, rstd, mean(g * w), mean(g * w * x_hat).
  std::vector<T> tmean(static_cast<size_t>(channels)), trstd(tmean), m1(tmean), m2(tmean);
  for (int64_t n = 0; n < batch; ++n) {
    const int64_t off = n * rows * channels;
    groupStats(x + off, rows, channels, groups, eps, mean, rstd);
    rowsGradSums(g + off, x + off, rows, channels, mean, sum_g, dot);  // sum g, sum g (x - mean)
    for (int64_t k = 0; k < groups; ++k) {
      const int64_t c0 = k * per, c1 = c0 + per;
      double s1 = 0, s2 = 0;  // sum(g * w), sum(g * w * x_hat)
      for (int64_t c = c0; c < c1; ++c) {
        s1 += sum_g[c] * weight[c];
        s2 += dot[c] * weight[c] * rstd[c];
      }
      for (int64_t c = c0; c < c1; ++c) {
        tmean[c] = static_cast<T>(mean[c]);
        trstd[c] = static_cast<T>(rstd[c]);
        m1[c] = static_cast<T>(size ? s1 / size : 0.0);
        m2[c] = static_cast<T>(size ? s2 / size : 0.0);
      }
    }
    for (int64_t c = 0; c < channels; ++c) {
      acc_w[c] += dot[c] * rstd[c];
      acc_b[c] += sum_g[c];
    }
    const T* gn = g + off;
    const T* xn = x + off;
    T* out = gx + off;
#pragma omp parallel for if (rows * channels > kOmpMinWork)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < channels; ++c) {
        const int64_t i = r * channels + c;
        const T xhat = (xn[i] - tmean[c]) * trstd[c];
        out[i] = trstd[c] * (gn[i] * weight[c] - m1[c] - xhat * m2[c]);
      }
  }
  for (int64_t c = 0; c < channels; ++c) {
    gw[c] = static_cast<T>(acc_w[c]);
    gb[c] = static_cast<T>(acc_b[c]);
  }
}

template void groupNormChannelsLast<float>(const float*, const float*, const float*, float*, int64_t, int64_t, int64_t,
                                           int64_t, double);
template void groupNormChannelsLast<double>(const double*, const double*, const double*, double*, int64_t, int64_t,
                                            int64_t, int64_t, double);
template void groupNormBackwardChannelsLast<float>(const float*, const float*, const float*, float*, float*, float*,
                                                   int64_t, int64_t, int64_t, int64_t, double);
template void groupNormBackwardChannelsLast<double>(const double*, const double*, const double*, double*, double*,
                                                    double*, int64_t, int64_t, int64_t, int64_t, double);

}  // namespace kiln::cpu
