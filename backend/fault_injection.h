// Faults a test injects through the environment, to make what is otherwise
// timing luck happen on purpose: a checkpoint write that takes long (or is
// killed halfway), ranks that drift apart step after step. Unset, each is
// one getenv and nothing else.
//
//   KILN_FAULT_CHECKPOINT_PAUSE_MS=N  a checkpoint's writer pauses N ms with
//                                     its files written under the temporary
//                                     name, before they are synced and moved
//                                     into place
//   KILN_FAULT_STEP_DELAY_MS=N        every step starts after a random pause
//                                     of 0..N ms (a different sequence on
//                                     every rank)
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <thread>

namespace kiln::fault {

/// The variable's milliseconds; 0 when unset or not a positive number.
inline int64_t millis(const char* variable) {
  const char* v = std::getenv(variable);
  if (!v || !*v) return 0;
  char* end = nullptr;
  const long long n = std::strtoll(v, &end, 10);
  return *end == '\0' && n > 0 ? n : 0;
}

inline void sleepMillis(int64_t ms) {
  if (ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

/// A pause of 0..max ms drawn from (seed, step): the same run pauses the
/// same way, and ranks (different seeds) differently.
inline int64_t stepDelay(int64_t max, uint64_t seed, int64_t step) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(step) + 1;  // splitmix64
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  return static_cast<int64_t>(x % static_cast<uint64_t>(max + 1));
}

}  // namespace kiln::fault
