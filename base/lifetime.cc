#include "base/lifetime.h"

namespace megastore {

Lifetime::Entry::Entry(std::shared_ptr<Lifetime> life) : life_(std::move(life)) {
  absl::MutexLock lock(&life_->mu_);
  if (life_->ended_) return;
  ++life_->active_;
  entered_ = true;
}

Lifetime::Entry::~Entry() {
  if (!entered_) return;
  absl::MutexLock lock(&life_->mu_);
  --life_->active_;
}

void Lifetime::End() {
  absl::MutexLock lock(&mu_);
  ended_ = true;
  mu_.Await(absl::Condition(
      +[](Lifetime* l) ABSL_EXCLUSIVE_LOCKS_REQUIRED(l->mu_) { return l->active_ == 0; }, this));
}

bool Lifetime::ended() {
  absl::MutexLock lock(&mu_);
  return ended_;
}

}  // namespace megastore
