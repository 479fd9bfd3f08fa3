// A stand-in for the catalog's writer in the component tests (StoreIndex::RecordWriter): keeps
// every record it is given and answers each write on a thread of its own, in the order given,
// as Catalog::PutSnapshotThen does. Never on the caller's thread: a completion takes the index's
// mutex, which the caller holds.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "store/store_index.h"

namespace adjsnap::testing {

class RecordWriter {
 public:
  RecordWriter() : thread_([this] { Loop(); }) {}
  ~RecordWriter() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  RecordWriter(const RecordWriter&) = delete;
  RecordWriter& operator=(const RecordWriter&) = delete;

  StoreIndex::RecordWriter Writer() {
    return [this](const v1::SnapshotRecord& r, std::function<void(Status)> done) {
      std::lock_guard<std::mutex> lock(mu_);
      records_.push_back(r);
      queue_.push_back({std::move(done), result_});
      cv_.notify_all();
    };
  }
  // What the writes given from now on answer.
  void SetResult(Status result) {
    std::lock_guard<std::mutex> lock(mu_);
    result_ = std::move(result);
  }
  // Returns once every write given before the call is answered.
  void Flush() {
    std::unique_lock<std::mutex> lock(mu_);
    const size_t target = records_.size();
    cv_.wait(lock, [&] { return answered_ >= target; });
  }
  std::vector<v1::SnapshotRecord> Records() {
    std::lock_guard<std::mutex> lock(mu_);
    return records_;
  }

 private:
  struct Write {
    std::function<void(Status)> done;
    Status result;
  };
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      Write w = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      w.done(w.result);
      lock.lock();
      ++answered_;
      cv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Write> queue_;
  std::vector<v1::SnapshotRecord> records_;
  size_t answered_ = 0;
  Status result_ = Status::Ok();
  bool stop_ = false;
  std::thread thread_;  // last: started once the rest exists
};

}  // namespace adjsnap::testing
