// The Engram gate and update (engram_gate.hpp).
#include "compute/engram/engram_gate.hpp"

#include <algorithm>
#include <cmath>
#include <string>

namespace waste::engram {

Result<EngramGateShape> EngramGateShape::make(int hc, int hidden, int rows, int row_dim, float eps) {
  const std::pair<const char*, int> dims[] = {{"hc", hc}, {"hidden", hidden}, {"rows", rows}, {"row_dim", row_dim}};
  for (const auto& [name, v] : dims) {
    if (v <= 0) {
      return make_error(Errc::format,
                        std::string("engram gate: ") + name + " " + std::to_string(v) + " is not positive");
    }
  }
  if (hc > 16) return make_error(Errc::format, "engram gate: hc " + std::to_string(hc) + " is above 16");
  if (!(eps >= 0.0f) || !std::isfinite(eps)) {
    return make_error(Errc::format, "engram gate: eps " + std::to_string(eps) + " is not a finite value >= 0");
  }
  return EngramGateShape{hc, hidden, rows, row_dim, eps};
}

Result<EngramGateWeights> EngramGateWeights::bind(const EngramGateShape& shape, const kernels::QuantMatrix& wkv,
                                                  std::span<const float> q_weight, std::span<const float> k_weight) {
  if (wkv.rows != shape.out_dim() || wkv.cols != shape.in_dim()) {
    return make_error(Errc::format, "engram wkv: [" + std::to_string(wkv.rows) + " x " + std::to_string(wkv.cols) +
                                        "], expected [" + std::to_string(shape.out_dim()) + " x " +
                                        std::to_string(shape.in_dim()) + "]");
  }
  const std::size_t n = std::size_t(shape.hc) * std::size_t(shape.hidden);
  if (q_weight.size() != n || k_weight.size() != n) {
    return make_error(Errc::format, "engram q_weight / k_weight: " + std::to_string(q_weight.size()) + " and " +
                                        std::to_string(k_weight.size()) + " floats, expected " +
                                        std::to_string(n) + " each");
  }
  EngramGateWeights w;
  w.wkv = wkv;
  w.qk.resize(n);
  for (std::size_t i = 0; i < n; ++i) w.qk[i] = q_weight[i] * k_weight[i];
  return w;
}

void engram_gate_apply(const forward::Exec& exec, const EngramGateShape& shape, const EngramGateWeights& w,
                       const float* rows, bool live, float* streams, EngramGateScratch& s, float* gates) {
  const int hc = shape.hc, hid = shape.hidden;
  if (!live) {
    if (gates != nullptr) {
      for (int k = 0; k < hc; ++k) gates[k] = 0.0f;
    }
    return;
  }
  forward::matvec(exec, w.wkv, rows, s.kv.data());
  const float* value = s.kv.data() + std::int64_t(hc) * hid;
  const float inv_sqrt_hidden = 1.0f / std::sqrt(float(hid));
  for (int k = 0; k < hc; ++k) {
    float* h = streams + std::int64_t(k) * hid;
    const float* key = s.kv.data() + std::int64_t(k) * hid;
    const float* qk = w.qk.data() + std::int64_t(k) * hid;
    float dot = 0.0f;
    for (int d = 0; d < hid; ++d) dot += h[d] * qk[d] * key[d];
    dot *= forward::rms_inverse(h, hid, shape.eps) * forward::rms_inverse(key, hid, shape.eps) * inv_sqrt_hidden;
    const float gate = forward::sigmoid(std::copysign(std::sqrt(std::max(std::fabs(dot), kEngramGateFloor)), dot));
    if (gates != nullptr) gates[k] = gate;
    for (int d = 0; d < hid; ++d) h[d] += gate * value[d];
  }
}

}  // namespace waste::engram
