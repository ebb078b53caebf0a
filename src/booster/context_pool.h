// Per-microbatch model contexts for the schedule in flight: a context is
// taken when a microbatch's forward starts and given back after its backward,
// and given-back contexts are reused, so the pool grows to exactly the number
// of microbatches the schedule holds at once (1F1B: stages - stage; GPipe:
// all) and the allocator's peak shows it.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "models/model.h"

namespace lattice {

class ContextPool {
 public:
  using Make = std::function<std::unique_ptr<ModelContext>(int chunk)>;
  explicit ContextPool(Make make) : make_(std::move(make)) {}

  ModelContext& take(int chunk, int microbatch) {
    auto& free = free_[chunk];
    std::unique_ptr<ModelContext> c;
    if (free.empty()) {
      c = make_(chunk);
    } else {
      c = std::move(free.back());
      free.pop_back();
    }
    ModelContext& ref = *c;
    busy_[{chunk, microbatch}] = std::move(c);
    return ref;
  }
  ModelContext& get(int chunk, int microbatch) {
    auto it = busy_.find({chunk, microbatch});
    LATTICE_CHECK(it != busy_.end(), "no context in flight for chunk {} microbatch {}", chunk, microbatch);
    return *it->second;
  }
  void give_back(int chunk, int microbatch) {
    auto it = busy_.find({chunk, microbatch});
    LATTICE_CHECK(it != busy_.end(), "no context in flight for chunk {} microbatch {}", chunk, microbatch);
    free_[chunk].push_back(std::move(it->second));
    busy_.erase(it);
  }
  void give_back_all() {
    while (!busy_.empty()) give_back(busy_.begin()->first.first, busy_.begin()->first.second);
  }

 private:
  Make make_;
  std::map<int, std::vector<std::unique_ptr<ModelContext>>> free_;
  std::map<std::pair<int, int>, std::unique_ptr<ModelContext>> busy_;
};

}  // namespace lattice
