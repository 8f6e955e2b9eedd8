// Which ops the stand-in ran and how the opdb classes them: the copy of torch-neuronx's tracking API
// (executed / fallback op sets, cleared on request), plus the ops it had to compute in a wider dtype.
// The verdict per (op, input dtypes) comes from the Python side (the opdb snapshot) once and is cached here,
// so the per-call cost is one hash lookup.
#include "tracking.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>

namespace neuron_standin {
namespace {

struct KeyHash {
  size_t operator()(const std::pair<const void*, uint64_t>& k) const {
    return std::hash<const void*>()(k.first) ^ (std::hash<uint64_t>()(k.second) * 0x9e3779b97f4a7c15ULL);
  }
};

struct Entry {
  Support support;
  uint64_t generation;  // the tracking generation in which this entry last added its name to a set
};

std::mutex g_mutex;
std::unordered_map<std::pair<const void*, uint64_t>, Entry, KeyHash> g_cache;
uint64_t g_generation = 1;
std::set<std::string> g_executed, g_fallback, g_unsupported;
std::map<std::pair<std::string, std::string>, std::string> g_widened;  // (op, dtypes) -> note
Resolver g_resolver;
bool g_keep_going = false;
Message g_messages;
thread_local int t_depth = 0;

}  // namespace

KernelScope::KernelScope() : outer_(t_depth == 0) { ++t_depth; }
KernelScope::~KernelScope() { --t_depth; }

uint64_t dtype_mask(const std::vector<c10::ScalarType>& types) {
  uint64_t mask = 0;
  for (auto t : types) mask |= 1ULL << static_cast<int>(t);
  return mask;
}

std::vector<std::string> dtype_list(uint64_t mask) {
  std::vector<std::string> names;
  for (int i = 0; i < 64; ++i) {
    if (mask & (1ULL << i)) names.emplace_back(c10::getDtypeNames(static_cast<c10::ScalarType>(i)).first);
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string dtype_names(uint64_t mask) {
  std::string out;
  for (const auto& name : dtype_list(mask)) out += (out.empty() ? "" : "/") + name;
  return out.empty() ? "no tensor inputs" : out;
}

void configure_tracking(Resolver resolver, Message messages, bool keep_going) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_resolver = std::move(resolver);
  g_messages = std::move(messages);
  g_keep_going = keep_going;
  g_cache.clear();
}

const Message& messages() { return g_messages; }

Support track(const void* key, const std::string& name, uint64_t mask) {
  std::unique_lock<std::mutex> lock(g_mutex);
  auto it = g_cache.find({key, mask});
  if (it == g_cache.end()) {
    // The resolver takes the GIL: never hold our lock while waiting for it.
    lock.unlock();
    Support support = g_resolver ? g_resolver(name, dtype_list(mask)) : Support::Unknown;
    lock.lock();
    it = g_cache.emplace(std::make_pair(key, mask), Entry{support, 0}).first;
  }
  Entry& entry = it->second;
  if (entry.support == Support::Unsupported && !g_keep_going) {
    TORCH_CHECK(false, g_messages.neuron, name, " (", dtype_names(mask), ") is not supported on the neuron device (opdb ",
                g_messages.version, "); it has no neuron kernel and no CPU fallback");
  }
  if (entry.generation != g_generation) {
    entry.generation = g_generation;
    auto& bucket = entry.support == Support::Native ? g_executed
                   : entry.support == Support::Unsupported ? g_unsupported : g_fallback;
    bucket.insert(name);
  }
  return entry.support;
}

void note_widened(const std::string& name, uint64_t mask, const std::string& note) {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::string dtypes;
  for (const auto& n : dtype_list(mask)) dtypes += (dtypes.empty() ? "" : ",") + n;
  g_widened.emplace(std::make_pair(name, dtypes), note);
}

TrackedOps tracked_ops() {
  std::lock_guard<std::mutex> lock(g_mutex);
  TrackedOps out;
  out.executed.assign(g_executed.begin(), g_executed.end());
  out.fallback.assign(g_fallback.begin(), g_fallback.end());
  out.unsupported.assign(g_unsupported.begin(), g_unsupported.end());
  for (const auto& [key, note] : g_widened) out.widened.push_back({key.first, key.second, note});
  return out;
}

void clear_tracking() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_generation += 1;
  g_executed.clear();
  g_fallback.clear();
  g_unsupported.clear();
  g_widened.clear();
}

}  // namespace neuron_standin
