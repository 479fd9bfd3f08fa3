// A push whose host block reaches fresh pages: the pages are populated on the store's populate
// thread, not on the caller's (the data-plane loop) and not under the index's mutex, and the
// push is answered once they are, as a parked push is. A disk read's block the same, on the I/O
// thread that reads. The population is held by the host tier's test hook
// (HostTierOptions::on_populate).
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include "store_fixture.h"

namespace adjsnap {
namespace {

using namespace std::chrono_literals;

// Holds the next population of one arena's pages until Release(); `fail` makes it fail.
struct PopulationHold {
  std::mutex mu;
  std::condition_variable cv;
  uint32_t arena = 0;
  bool armed = false;
  bool held = false;
  bool released = false;
  bool fail = false;

  bool OnPopulate(uint32_t populating) {
    std::unique_lock<std::mutex> lock(mu);
    if (!armed || populating != arena) return true;
    armed = false;
    held = true;
    cv.notify_all();
    cv.wait(lock, [this] { return released; });
    return !fail;
  }
  void Arm(uint32_t which) {
    std::lock_guard<std::mutex> lock(mu);
    arena = which;
    armed = true;
    held = released = false;
  }
  bool WaitHeld() {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, 20s, [this] { return held; });
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu);
    released = true;
    cv.notify_all();
  }
};

class StorePopulateTest : public StoreTest {
 protected:
  static constexpr uint64_t kStep = 2 * HostTier::kUnit;  // fresh units at every new offset
  static constexpr uint32_t kUidA = 4001;
  static constexpr uint32_t kUidB = 4002;

  void SetUp() override {
    store_.reset();
    HostTierOptions options;  // per-uid arenas: A's and B's pages are apart
    options.on_populate = [h = hold_](uint32_t arena, uint64_t, uint64_t) {
      return h->OnPopulate(arena);
    };
    tier_ = std::move(HostTier::Create(16 * kStep, options).value());
    Open();
    id_a_ = OpenRunOf("a", kUidA);
    id_b_ = OpenRunOf("b", kUidB);
  }
  void TearDown() override {
    hold_->Release();  // a failed test may leave it held
    StoreTest::TearDown();
  }
  uint64_t OpenRunOf(const std::string& name, uint32_t owner,
                     v1::Layers layers = v1::LAYERS_DISK_HOST) {
    v1::RunSpec spec;
    spec.set_name(name);
    spec.set_bytes_per_step(kStep);
    // N unknown: a DiskHost run's steps stay in host memory while it has room.
    spec.set_layers(layers);
    spec.set_keep(true);
    bool created = false;
    auto run = store_->OpenRun(spec, owner, &created);
    EXPECT_TRUE(run.ok()) << run.status().ToString();
    return run.ok() ? run->run_id() : 0;
  }
  // Fills a ticket's block with Pattern(step, i) and commits it.
  Status Fill(const Store::PushTicket& t) {
    char* p = static_cast<char*>(t.block->data());
    for (size_t i = 0; i < kStep; ++i) p[i] = Pattern(t.step, i);
    return store_->CommitPush(t);
  }
  // Run B with step 1 stored and the room of its step 0 free but populated (kept warm).
  void WarmRunB() {
    ASSERT_TRUE(Push(id_b_, 0, kStep).ok());
    ASSERT_TRUE(Push(id_b_, 1, kStep).ok());
    store_->WaitChecksumsIdle();  // the checksum thread holds no block now
    ASSERT_TRUE(store_->DeleteSnapshot("4002:b", 0).ok());
  }

  // Run "4001:d" (uid A, layers Disk) with step 0 on disk only, and A's arena holding no pages:
  // a fetch of it reads into fresh ones.
  uint64_t StepOnDiskOnly() {
    uint64_t id = OpenRunOf("d", kUidA, v1::LAYERS_DISK);
    EXPECT_TRUE(Push(id, 0, kStep).ok());
    store_->WaitTieringIdle();
    store_->WaitChecksumsIdle();
    auto where = store_->Locate("4001:d", 0);
    EXPECT_TRUE(where.ok() && where->tier() == v1::TIER_DISK)
        << (where.ok() ? v1::Tier_Name(where->tier()) : where.status().ToString());
    EXPECT_GT(tier_->ReleaseFree(), 0u);  // the staging block's pages go back to the OS
    return id;
  }

  std::shared_ptr<PopulationHold> hold_ = std::make_shared<PopulationHold>();
  uint64_t id_a_ = 0;
  uint64_t id_b_ = 0;
};

TEST_F(StorePopulateTest, OtherPushesAndFetchesGoOnWhileAPushsPagesArePopulated) {
  ASSERT_NO_FATAL_FAILURE(WarmRunB());
  hold_->Arm(tier_->ArenaFor(kUidA));
  std::future<Result<Store::PushTicket>> held =
      std::async(std::launch::async, [this] { return Reserve(*store_, id_a_, 0, kStep); });
  ASSERT_TRUE(hold_->WaitHeld()) << "run A's push never populated its pages";
  // Meanwhile: run B's push into warm pages, and a fetch. Neither may wait for A's pages.
  std::future<Status> others = std::async(std::launch::async, [this]() -> Status {
    auto where = store_->Locate("4001:a", 0);
    ADJSNAP_RETURN_IF_ERROR(where.status());
    if (where->tier() != v1::TIER_IN_FLIGHT) {
      return Status::Internal("A's step 0 is " + v1::Tier_Name(where->tier()) +
                              ", not reserved, while its pages are populated");
    }
    ADJSNAP_ASSIGN_OR_RETURN(Store::PushTicket t, Reserve(*store_, id_b_, 2, kStep));
    ADJSNAP_RETURN_IF_ERROR(Fill(t));
    ADJSNAP_RETURN_IF_ERROR(FetchExact(id_b_, 1, kStep));
    return FetchExact(id_b_, 2, kStep);
  });
  const bool went_on = others.wait_for(20s) == std::future_status::ready;
  hold_->Release();  // (a store that waited for A's pages under its mutex is unstuck here)
  ASSERT_TRUE(went_on) << "run B's push and fetch waited for run A's pages";
  Status done = others.get();
  EXPECT_TRUE(done.ok()) << done.ToString();
  Result<Store::PushTicket> t = held.get();
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_TRUE(Fill(*t).ok());
  Status exact = FetchExact(id_a_, 0, kStep);
  EXPECT_TRUE(exact.ok()) << exact.ToString();
}

TEST_F(StorePopulateTest, APushWhoseRunIsDeletedWhileItsPagesArePopulatedIsNotFound) {
  const uint64_t used = tier_->used();
  hold_->Arm(tier_->ArenaFor(kUidA));
  std::future<Result<Store::PushTicket>> held =
      std::async(std::launch::async, [this] { return Reserve(*store_, id_a_, 0, kStep); });
  ASSERT_TRUE(hold_->WaitHeld());
  EXPECT_EQ(store_->PushesInFlight(), 1u);  // reserved: a stop waits for it
  ASSERT_TRUE(store_->DeleteRun("4001:a").ok());
  hold_->Release();
  Result<Store::PushTicket> t = held.get();
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), Code::kNotFound) << t.status().ToString();
  EXPECT_EQ(tier_->used(), used);  // its block went back
  EXPECT_EQ(store_->PushesInFlight(), 0u);
}

TEST_F(StorePopulateTest, APopulationThatFailsRefusesThePushAsResourceExhausted) {
  hold_->fail = true;
  hold_->Arm(tier_->ArenaFor(kUidA));
  std::future<Result<Store::PushTicket>> held =
      std::async(std::launch::async, [this] { return Reserve(*store_, id_a_, 0, kStep); });
  ASSERT_TRUE(hold_->WaitHeld());
  hold_->Release();
  Result<Store::PushTicket> t = held.get();
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), Code::kResourceExhausted) << t.status().ToString();
  EXPECT_NE(t.status().message().find("populating"), std::string::npos) << t.status().ToString();
  EXPECT_EQ(store_->Counters().refused_pushes, 1u);
  EXPECT_EQ(store_->PushesInFlight(), 0u);
  // The step is free to push again, and this time its pages come.
  hold_->fail = false;
  ASSERT_TRUE(Push(id_a_, 0, kStep).ok());
  Status exact = FetchExact(id_a_, 0, kStep);
  EXPECT_TRUE(exact.ok()) << exact.ToString();
}

TEST_F(StorePopulateTest, OtherPushesAndFetchesGoOnWhileADiskReadsPagesArePopulated) {
  ASSERT_NO_FATAL_FAILURE(WarmRunB());
  const uint64_t id_d = StepOnDiskOnly();
  ASSERT_FALSE(HasFailure());
  hold_->Arm(tier_->ArenaFor(kUidA));
  std::future<Status> held =
      std::async(std::launch::async, [this, id_d] { return FetchExact(id_d, 0, kStep); });
  ASSERT_TRUE(hold_->WaitHeld()) << "the disk read never populated its pages";
  // Meanwhile (the read's pages held on the I/O thread): run B's push and fetches.
  std::future<Status> others = std::async(std::launch::async, [this]() -> Status {
    ADJSNAP_ASSIGN_OR_RETURN(Store::PushTicket t, Reserve(*store_, id_b_, 2, kStep));
    ADJSNAP_RETURN_IF_ERROR(Fill(t));
    ADJSNAP_RETURN_IF_ERROR(FetchExact(id_b_, 1, kStep));
    return FetchExact(id_b_, 2, kStep);
  });
  const bool went_on = others.wait_for(20s) == std::future_status::ready;
  hold_->Release();
  ASSERT_TRUE(went_on) << "run B's push and fetch waited for the disk read's pages";
  Status done = others.get();
  EXPECT_TRUE(done.ok()) << done.ToString();
  Status exact = held.get();
  EXPECT_TRUE(exact.ok()) << exact.ToString();
}

// The kernel cannot populate the read's pages: the fetch is refused RESOURCE_EXHAUSTED, naming
// the population; the step is not lost, stays on disk, and the next fetch serves it exact.
TEST_F(StorePopulateTest, ADiskReadWhosePagesCannotBePopulatedLosesNothing) {
  const uint64_t id_d = StepOnDiskOnly();
  ASSERT_FALSE(HasFailure());
  const uint64_t used = tier_->used();
  hold_->fail = true;
  hold_->Arm(tier_->ArenaFor(kUidA));
  std::future<Status> held =
      std::async(std::launch::async, [this, id_d] { return FetchExact(id_d, 0, kStep); });
  ASSERT_TRUE(hold_->WaitHeld());
  hold_->Release();
  Status refused = held.get();
  EXPECT_EQ(refused.code(), Code::kResourceExhausted) << refused.ToString();
  EXPECT_NE(refused.message().find("populating"), std::string::npos) << refused.ToString();
  store_->WaitTieringIdle();
  EXPECT_EQ(tier_->used(), used);  // the read's block went back
  auto where = store_->Locate("4001:d", 0);
  ASSERT_TRUE(where.ok()) << where.status().ToString();
  EXPECT_EQ(where->tier(), v1::TIER_DISK);
  hold_->fail = false;
  Status exact = FetchExact(id_d, 0, kStep);
  EXPECT_TRUE(exact.ok()) << exact.ToString();
}

// The store's end runs the populations queued and answers their pushes (their clients are gone
// or told): no push is left unanswered, and nothing touches the store after it.
TEST_F(StorePopulateTest, AStoreThatEndsAnswersAPushWaitingForItsPages) {
  hold_->Arm(tier_->ArenaFor(kUidA));
  auto answer = std::make_shared<std::promise<Result<Store::PushTicket>>>();
  ASSERT_TRUE(store_->BeginPush(
      id_a_, 0, kStep, [answer](Result<Store::PushTicket> t) { answer->set_value(std::move(t)); }));
  ASSERT_TRUE(hold_->WaitHeld());
  std::thread ending([this] { store_.reset(); });
  hold_->Release();
  ending.join();
  auto f = answer->get_future();
  ASSERT_EQ(f.wait_for(0s), std::future_status::ready) << "the push was never answered";
  Result<Store::PushTicket> t = f.get();
  // Released before the store began to end: its ticket; after: UNAVAILABLE.
  EXPECT_TRUE(t.ok() || t.status().code() == Code::kUnavailable) << t.status().ToString();
}

}  // namespace
}  // namespace adjsnap
