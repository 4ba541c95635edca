// Internal: how a registry hashes, compares and prints its keys. KeyHash and
// append_key_text are public (registry.h documents them); the rest is not.
//
// hash_bytes is a wyhash-style hash inlined for short strings: keys like
// "host-123456:443" (<= 16 bytes) take two overlapping loads and two multiplies.
// mix64 spreads whatever hash the registry is given (std::hash is the identity for
// integers) so the shard, the slot and the tag all get well-mixed bits. Everything is
// stateless and thread-safe.

#ifndef BULWARK_DETAIL_REGISTRY_HASH_H_
#define BULWARK_DETAIL_REGISTRY_HASH_H_

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <string_view>
#include <type_traits>

namespace bulwark {
namespace detail {

inline std::uint64_t load_u64(const char* p) noexcept {
  std::uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline std::uint64_t load_u32(const char* p) noexcept {
  std::uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
// 64x64 -> 128-bit multiply, halves folded: the mixing step of wyhash.
inline std::uint64_t mul_fold(std::uint64_t a, std::uint64_t b) noexcept {
  __extension__ using u128 = unsigned __int128;
  const u128 r = static_cast<u128>(a) * b;
  return static_cast<std::uint64_t>(r) ^ static_cast<std::uint64_t>(r >> 64);
}

// A wyhash-style hash of a byte string, inline: keys like "host-123456:443" (<= 16
// bytes) take two overlapping loads and two multiplies, where std::hash's out-of-line
// MurmurHash2 costs a library call and a loop. Unkeyed, like std::hash: for keys an
// adversary chooses, give the registry a keyed hash of your own.
inline std::uint64_t hash_bytes(const char* p, std::size_t n) noexcept {
  constexpr std::uint64_t k0 = 0xa0761d6478bd642fULL, k1 = 0xe7037ed1a0b428dbULL,
                          k2 = 0x8ebc6af09c88c6e3ULL;
  std::uint64_t acc = k0, a = 0, b = 0;
  if (n <= 16) {
    if (n >= 4) {
      const std::size_t mid = (n >> 3) << 2;  // 0 for n < 8, 4 for n >= 8
      a = (load_u32(p) << 32) | load_u32(p + mid);
      b = (load_u32(p + n - 4) << 32) | load_u32(p + n - 4 - mid);
    } else if (n > 0) {
      const auto u = [&](std::size_t i) {
        return static_cast<std::uint64_t>(static_cast<unsigned char>(p[i]));
      };
      a = (u(0) << 16) | (u(n >> 1) << 8) | u(n - 1);
    }
  } else {
    std::size_t i = n;
    for (; i > 16; i -= 16, p += 16) acc = mul_fold(load_u64(p) ^ k1, load_u64(p + 8) ^ acc);
    a = load_u64(p + i - 16);
    b = load_u64(p + i - 8);
  }
  return mul_fold(k1 ^ n, mul_fold(a ^ k1, b ^ acc ^ k2));
}

// Equality of two byte strings of the same length, inline for short ones (the call to
// memcmp is a good part of a lookup otherwise).
inline bool bytes_equal(const char* a, const char* b, std::size_t n) noexcept {
  if (n <= 16) {
    if (n >= 8)
      return (load_u64(a) ^ load_u64(b)) == 0 && (load_u64(a + n - 8) ^ load_u64(b + n - 8)) == 0;
    if (n >= 4)
      return (load_u32(a) ^ load_u32(b)) == 0 && (load_u32(a + n - 4) ^ load_u32(b + n - 4)) == 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (a[i] != b[i]) return false;
    }
    return true;
  }
  return std::memcmp(a, b, n) == 0;
}

// fmix64 (MurmurHash3's finaliser): a bijection that spreads every input bit.
constexpr std::uint64_t mix64(std::uint64_t h) noexcept {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ULL;
  h ^= h >> 33;
  return h;
}

}  // namespace detail

// The registry's hash: std::hash for most keys; for std::string keys an inline
// wyhash-style hash (detail::hash_bytes), transparent, so that a lookup by
// std::string_view or const char* builds no string.
template <class Key>
struct KeyHash {
  std::size_t operator()(const Key& key) const noexcept(noexcept(std::hash<Key>{}(key))) {
    return std::hash<Key>{}(key);
  }
};
template <>
struct KeyHash<std::string> {
  using is_transparent = void;
  std::size_t operator()(std::string_view key) const noexcept {
    return static_cast<std::size_t>(detail::hash_bytes(key.data(), key.size()));
  }
};

// How a key appears as text (the Prometheus `key` label, events). Customise it for
// your own key type with an ADL-found `void bulwark_key_text(const K&, std::string&)`;
// strings, integers and types with a to_string() work as they are.
template <class Key>
void append_key_text(std::string& out, const Key& key) {
  if constexpr (requires { bulwark_key_text(key, out); }) {
    bulwark_key_text(key, out);
  } else if constexpr (std::is_convertible_v<const Key&, std::string_view>) {
    out.append(std::string_view(key));
  } else if constexpr (std::is_integral_v<Key>) {
    char buf[24];
    const auto r = std::to_chars(buf, buf + sizeof buf, key);
    out.append(buf, r.ptr);
  } else if constexpr (requires { to_string(key); }) {
    out.append(to_string(key));
  } else if constexpr (requires { std::to_string(key); }) {
    out.append(std::to_string(key));
  } else {
    static_assert(
        sizeof(Key) == 0,
        "bulwark: define `void bulwark_key_text(const Key&, std::string&)` next to your key type");
  }
}

namespace detail {

// Calls f(std::string_view) with the key's text; builds no string for string keys.
template <class Key, class F>
void with_key_text(const Key& key, F&& f) {
  if constexpr (std::is_convertible_v<const Key&, std::string_view> &&
                !requires(std::string & out) { bulwark_key_text(key, out); }) {
    f(std::string_view(key));
  } else {
    std::string text;
    append_key_text(text, key);
    f(std::string_view(text));
  }
}

// Heap memory a key owns: a string-like key's buffer when it does not fit inline.
template <class Key>
std::size_t key_heap_bytes(const Key& key) noexcept {
  if constexpr (requires {
                  key.capacity();
                  key.data();
                }) {
    const auto* data = reinterpret_cast<const unsigned char*>(key.data());
    const auto* self = reinterpret_cast<const unsigned char*>(&key);
    const bool inline_buffer = data >= self && data < self + sizeof(Key);
    return inline_buffer ? 0 : (key.capacity() + 1) * sizeof(*key.data());
  } else {
    return 0;
  }
}

}  // namespace detail
}  // namespace bulwark

#endif  // BULWARK_DETAIL_REGISTRY_HASH_H_
