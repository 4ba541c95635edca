// A small index per live thread, for structures striped by thread (a striped time
// window, a striped bulkhead): the lowest index no other live thread holds, taken at
// the thread's first use and given back at its exit, so that N threads running at once
// hold indices 0..N-1 and a stripe count of N gives each its own stripe.
//
// Cost: a thread-local load on every use; the first use of a thread claims an index
// (a scan of a 4,096-bit map, one CAS). Beyond 4,096 threads at once, indices repeat
// (they are only a hint for spreading writes: two threads sharing one stays correct).

#ifndef BULWARK_DETAIL_THREAD_SLOT_H_
#define BULWARK_DETAIL_THREAD_SLOT_H_

#include <cstdint>

namespace bulwark::detail {

// The calling thread's index plus one, or 0 before its first thread_slot().
extern constinit thread_local std::uint32_t tls_thread_slot;

// Claims the calling thread's index (the slow path of thread_slot()).
std::uint32_t claim_thread_slot() noexcept;

// The calling thread's index: the same for the thread's whole life.
[[gnu::always_inline]] inline std::uint32_t thread_slot() noexcept {
  const std::uint32_t s = tls_thread_slot;
  if (s != 0) [[likely]]
    return s - 1;
  return claim_thread_slot();
}

}  // namespace bulwark::detail

#endif  // BULWARK_DETAIL_THREAD_SLOT_H_
