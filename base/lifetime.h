// What an object's timers and reply callbacks hold to enter its code when
// they may fire after it is gone: a popped timer that Env::Cancel can no
// longer stop, an RPC answer that arrives while the object is destroyed.
//
//   class Server {
//     ~Server() { life_->End(); }  // first: later callbacks do nothing
//     void Arm() {
//       env_->Schedule(d, [life = life_, this] {
//         Lifetime::Entry in(life);
//         if (in) Tick();
//       });
//     }
//     std::shared_ptr<Lifetime> life_ = std::make_shared<Lifetime>();
//   };
#pragma once

#include <memory>

#include "absl/synchronization/mutex.h"

namespace megastore {

class Lifetime {
 public:
  // Inside the object's code while true: entered unless End() was called.
  // Entries nest (a callback that runs another synchronously).
  class Entry {
   public:
    explicit Entry(std::shared_ptr<Lifetime> life);
    ~Entry();
    Entry(const Entry&) = delete;
    Entry& operator=(const Entry&) = delete;
    explicit operator bool() const { return entered_; }

   private:
    std::shared_ptr<Lifetime> life_;
    bool entered_ = false;
  };

  // Runs `fn` inside, unless the object is gone. Whether it ran.
  template <typename Fn>
  static bool Run(const std::shared_ptr<Lifetime>& life, Fn&& fn) {
    Entry in(life);
    if (in) fn();
    return static_cast<bool>(in);
  }

  // Makes every later Entry fail, then waits until the callbacks inside on
  // other threads have left. Called once the object stops taking work and
  // before its members go. Not from inside an Entry on this thread: that
  // one would wait for itself.
  void End();
  bool ended();

 private:
  absl::Mutex mu_;
  int active_ ABSL_GUARDED_BY(mu_) = 0;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace megastore
