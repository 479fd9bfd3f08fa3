#include "host_tier/host_tier.h"

#include <gtest/gtest.h>

#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <linux/magic.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <cerrno>
#include <cstring>
#include <vector>

#include "sanitizer.h"
#include "temp_dir.h"

namespace adjsnap {
namespace {

// Runs `body` in a forked child and returns what it wrote to the pipe it is given (the child
// makes system calls and small allocations only; the tier has no threads of its own here).
template <typename Body>
std::string InAChild(Body body) {
  int p[2];
  if (pipe(p) != 0) return "pipe failed";
  pid_t pid = fork();
  if (pid == 0) {
    close(p[0]);
    std::string out = body();
    (void)!write(p[1], out.data(), out.size());
    _exit(0);
  }
  close(p[1]);
  std::string out;
  char buf[512];
  for (ssize_t n; (n = read(p[0], buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  close(p[0]);
  waitpid(pid, nullptr, 0);
  return out;
}

// Minor page faults a fresh process takes to write `bytes` at `offset` of the tier's file
// through a mapping of its own: what a solver process pays on its first push.
long FaultsOfAFreshProcessWriting(int fd, uint64_t budget, uint64_t offset, uint64_t bytes) {
  return std::stol("0" + InAChild([&] {
    void* m = mmap(nullptr, budget, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) return std::string("-1");
    rusage before{}, after{};
    getrusage(RUSAGE_SELF, &before);
    std::memset(static_cast<char*>(m) + offset, 1, bytes);
    getrusage(RUSAGE_SELF, &after);
    return std::to_string(after.ru_minflt - before.ru_minflt);
  }));
}

TEST(HostTier, NeverHandsOutMoreThanItsBudget) {
  auto tier = HostTier::Create(1 << 20);
  ASSERT_TRUE(tier.ok());
  std::vector<std::shared_ptr<HostBlock>> blocks;
  for (;;) {
    auto b = (*tier)->Allocate(100 * 1000);  // not page-aligned: rounded up to pages
    if (!b.ok()) {
      EXPECT_EQ(b.status().code(), Code::kResourceExhausted);
      EXPECT_NE(b.status().message().find("host tier full"), std::string::npos);
      break;
    }
    blocks.push_back(std::move(b).value());
  }
  EXPECT_EQ(blocks.size(), 10u);  // 10 x 25 pages fit in 256 pages, 11 do not
  EXPECT_LE((*tier)->used(), (*tier)->budget());
  std::sort(blocks.begin(), blocks.end(),
            [](const auto& a, const auto& b) { return a->offset() < b->offset(); });
  for (size_t i = 0; i < blocks.size(); ++i) {  // inside the arena, aligned, none overlap
    EXPECT_LE(blocks[i]->offset() + blocks[i]->size(), (*tier)->budget());
    EXPECT_EQ(blocks[i]->offset() % HostTier::kAlignment, 0u);
    EXPECT_GE(blocks[i]->size(), 100u * 1000);
    if (i > 0) {
      EXPECT_LE(blocks[i - 1]->offset() + blocks[i - 1]->size(), blocks[i]->offset()) << i;
    }
  }
}

TEST(HostTier, FreedNeighboursCoalesceIntoOneBlock) {
  auto tier = HostTier::Create(1 << 20);
  ASSERT_TRUE(tier.ok());
  {
    auto a = (*tier)->Allocate(512 << 10);
    auto b = (*tier)->Allocate(512 << 10);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_FALSE((*tier)->Allocate(4096).ok());
  }
  EXPECT_EQ((*tier)->used(), 0u);
  auto whole = (*tier)->Allocate(1 << 20);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
}

TEST(HostTier, BlocksAreWritableSharedMemory) {
  auto tier = HostTier::Create(1 << 20);
  ASSERT_TRUE(tier.ok());
  EXPECT_GE((*tier)->fd(), 0);
  auto first = (*tier)->Allocate(4096);  // so that the block under test is not at offset 0
  auto b = (*tier)->Allocate(4096);
  ASSERT_TRUE(first.ok() && b.ok());
  static_cast<char*>((*b)->data())[4095] = 42;
  // What a client sees: the memfd mapped again, read at the block's offset.
  void* view = mmap(nullptr, (*tier)->budget(), PROT_READ, MAP_SHARED, (*tier)->fd(), 0);
  ASSERT_NE(view, MAP_FAILED) << std::strerror(errno);
  EXPECT_EQ(static_cast<const char*>(view)[(*b)->offset() + 4095], 42);
  EXPECT_EQ(static_cast<const char*>(view)[(*first)->offset() + 4095], 0);
  munmap(view, (*tier)->budget());
}

// A memfd kept through a restart: the new tier maps the same memory, claims the blocks the
// catalog names at their offsets, and resizes the memfd to its own budget.
TEST(HostTier, AnAdoptedMemfdKeepsItsBytesAndItsBlocksCanBeClaimed) {
  auto old_tier = HostTier::Create(16 * 4096);
  ASSERT_TRUE(old_tier.ok());
  uint64_t offset = 0;
  {
    auto pad = (*old_tier)->Allocate(4096).value();
    auto b = (*old_tier)->Allocate(2 * 4096).value();
    offset = b->offset();
    std::memset(b->data(), 0x5a, 2 * 4096);
  }
  int kept = dup((*old_tier)->fd());  // what systemd's fd store holds
  old_tier->reset();
  auto tier = HostTier::Adopt(kept, 32 * 4096);  // a larger budget after the restart
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  EXPECT_EQ((*tier)->budget(), 32u * 4096);
  auto claimed = (*tier)->Claim(offset, 2 * 4096);
  ASSERT_TRUE(claimed.ok()) << claimed.status().ToString();
  EXPECT_EQ(static_cast<const char*>((*claimed)->data())[2 * 4096 - 1], 0x5a);
  EXPECT_EQ((*tier)->used(), 2u * 4096);
  EXPECT_FALSE((*tier)->Claim(offset + 4096, 4096).ok());  // already claimed
  EXPECT_FALSE((*tier)->Claim(32 * 4096, 4096).ok());      // beyond the budget
  // The rest is free as usual; the first block goes below the claimed one.
  EXPECT_EQ((*tier)->Allocate(4096).value()->offset(), 0u);
}

TEST(HostTier, TopAllocationsLeaveWholeHolesAtTheBottom) {
  auto tier = std::move(HostTier::Create(64 * 4096).value());
  auto low = tier->Allocate(16 * 4096).value();
  auto high = tier->Allocate(4096, /*from_top=*/true).value();
  EXPECT_EQ(low->offset(), 0u);
  EXPECT_EQ(high->offset(), 63u * 4096);  // the end of the arena
  low.reset();
  // The 16 pages at the bottom are whole again: a raw block of that size fits there.
  EXPECT_EQ(tier->Allocate(16 * 4096).value()->offset(), 0u);
}

TEST(HostTier, ShrinkingABlockReturnsItsTail) {
  auto tier = std::move(HostTier::Create(16 * 4096).value());
  auto b = tier->Allocate(8 * 4096).value();
  b->ShrinkTo(4096 + 1);  // rounds up to two pages
  EXPECT_EQ(b->size(), 2u * 4096);
  EXPECT_EQ(tier->used(), 2u * 4096);
  auto rest = tier->Allocate(14 * 4096);  // the tail is free and coalesced
  EXPECT_TRUE(rest.ok());
  b.reset();
  EXPECT_EQ(tier->used(), 14u * 4096);
}

// Freed blocks' pages go back to the OS; the bytes of the blocks still held stay as they were.
TEST(HostTier, ReleaseFreeGivesBackTheFreedPagesOnly) {
  constexpr uint64_t kBlock = 8 << 20;
  auto tier = HostTier::Create(4 * kBlock);
  ASSERT_TRUE(tier.ok());
  auto kept = (*tier)->Allocate(kBlock);
  auto freed = (*tier)->Allocate(kBlock);
  ASSERT_TRUE(kept.ok() && freed.ok());
  std::memset((*kept)->data(), 0x5a, kBlock);
  std::memset((*freed)->data(), 0xa5, kBlock);
  const uint64_t freed_offset = (*freed)->offset();
  EXPECT_GE((*tier)->resident_bytes(), 2 * kBlock);
  freed->reset();
  EXPECT_GE((*tier)->resident_bytes(), 2 * kBlock);  // freeing alone keeps the pages warm
  EXPECT_EQ((*tier)->ReleaseFree(), 3 * kBlock);     // every free range, resident or not
  EXPECT_LT((*tier)->resident_bytes(), kBlock + kBlock / 8);
  const auto* bytes = static_cast<const unsigned char*>((*kept)->data());
  EXPECT_TRUE(std::all_of(bytes, bytes + kBlock, [](unsigned char c) { return c == 0x5a; }));
  // The released range is zero to its next owner, never the last owner's bytes.
  auto again = (*tier)->Allocate(kBlock);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->offset(), freed_offset);
  bytes = static_cast<const unsigned char*>((*again)->data());
  EXPECT_TRUE(std::all_of(bytes, bytes + kBlock, [](unsigned char c) { return c == 0; }));
}

// A tier taken back from the fd store holds kept steps in what are still free ranges until they
// are claimed: nothing is given back before StartRelease, however long that takes.
TEST(HostTier, AnAdoptedTierGivesNothingBackBeforeItsKeptStepsAreClaimed) {
  constexpr uint64_t kBlock = HostTier::kUnit;  // pages come and go in units
  uint64_t offset = 0;
  int kept = -1;
  {
    auto old_tier = HostTier::Create(4 * kBlock);
    ASSERT_TRUE(old_tier.ok());
    auto b = (*old_tier)->Allocate(kBlock).value();
    offset = b->offset();
    std::memset(b->data(), 0x3c, kBlock);
    kept = dup((*old_tier)->fd());
  }
  HostTierOptions options;
  options.release_after = std::chrono::seconds(1);
  auto tier = HostTier::Adopt(kept, 4 * kBlock, options);
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  // A free, and an allocation long ago; its second unit is populated for it.
  { auto freed = (*tier)->Allocate(2 * kBlock).value(); }
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  auto claimed = (*tier)->Claim(offset, kBlock);
  ASSERT_TRUE(claimed.ok()) << claimed.status().ToString();
  const auto* bytes = static_cast<const unsigned char*>((*claimed)->data());
  EXPECT_TRUE(std::all_of(bytes, bytes + kBlock, [](unsigned char c) { return c == 0x3c; }));
  // Once started, the release gives back what is free and leaves the claimed block alone.
  (*tier)->StartRelease();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while ((*tier)->resident_bytes() > kBlock && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_LE((*tier)->resident_bytes(), kBlock);
  EXPECT_TRUE(std::all_of(bytes, bytes + kBlock, [](unsigned char c) { return c == 0x3c; }));
}

// With release_after set, an idle tier gives its free pages back by itself.
TEST(HostTier, AnIdleTierReleasesItsFreePagesByItself) {
  constexpr uint64_t kBlock = 8 << 20;
  HostTierOptions options;
  options.release_after = std::chrono::seconds(1);
  auto tier = HostTier::Create(2 * kBlock, options);
  ASSERT_TRUE(tier.ok());
  {
    auto b = (*tier)->Allocate(kBlock);
    ASSERT_TRUE(b.ok());
    std::memset((*b)->data(), 1, kBlock);
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while ((*tier)->resident_bytes() >= kBlock / 8 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_LT((*tier)->resident_bytes(), kBlock / 8);
}

// Per-uid arenas: each uid's blocks lie in a memfd of its own, the blocks of every arena
// together never pass the one budget, the tier populates a block's pages itself before handing
// it out (so they are charged to adjsnapd, not to the client that touches them first), and one
// arena's free warm pages are given back when another arena needs fresh ones.
TEST(HostTier, ArenasOfTwoUidsShareTheBudgetAndNoPages) {
  constexpr uint64_t kBlock = 2 * HostTier::kUnit;
  auto created = HostTier::Create(4 * kBlock);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  HostTier& tier = **created;
  EXPECT_TRUE(tier.per_uid_arenas());
  EXPECT_EQ(tier.ArenaFor(1001), 1001u);
  const uint64_t before = tier.resident_bytes();
  auto a = tier.AllocateIn(1001, 2 * kBlock);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ((*a)->arena(), 1001u);
  EXPECT_GE(tier.resident_bytes(), before + 2 * kBlock);  // populated, nobody wrote a byte
  std::memset((*a)->data(), 0xa1, 2 * kBlock);
  auto b = tier.AllocateIn(1002, 2 * kBlock);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ((*b)->arena(), 1002u);
  EXPECT_EQ((*b)->offset(), 0u);  // an arena of its own: it starts at the bottom too
  EXPECT_EQ(tier.used(), 4 * kBlock);
  auto over = tier.AllocateIn(1003, HostTier::kAlignment);  // the budget is full, all arenas
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), Code::kResourceExhausted);
  EXPECT_EQ(tier.largest_free(1002), 0u);
  auto fa = tier.ArenaFd(1001), fb = tier.ArenaFd(1002);
  ASSERT_TRUE(fa.ok() && fb.ok());
  EXPECT_NE(fa->first, fb->first);
  EXPECT_EQ(tier.arena_fds().size(), 3u);  // adjsnapd's own, 1001's and 1002's
  // What a client of uid 1002 maps: its own arena, with none of 1001's bytes in it.
  void* view = mmap(nullptr, fb->second, PROT_READ, MAP_SHARED, fb->first, 0);
  ASSERT_NE(view, MAP_FAILED);
  const auto* bytes = static_cast<const unsigned char*>(view);
  EXPECT_TRUE(std::none_of(bytes, bytes + fb->second, [](unsigned char c) { return c == 0xa1; }));
  munmap(view, fb->second);
  // 1001's block goes; its pages stay warm for 1001 until 1002 needs fresh ones.
  a->reset();
  EXPECT_GE(tier.resident_bytes(), 4 * kBlock);
  auto c = tier.AllocateIn(1002, 2 * kBlock);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_LE(tier.resident_bytes(), 4 * kBlock);  // 1001's free units were given back
  void* mine = mmap(nullptr, fa->second, PROT_READ, MAP_SHARED, fa->first, 0);
  ASSERT_NE(mine, MAP_FAILED);
  bytes = static_cast<const unsigned char*>(mine);
  EXPECT_TRUE(std::none_of(bytes, bytes + fa->second, [](unsigned char c) { return c != 0; }));
  munmap(mine, fa->second);
}

// host_prefault = "background": the tier's own thread populates a new arena ahead of its first
// block (a solver's session asks for its arena before it pushes) and an arena whose blocks
// reach fresh units, never past the budget's worth of resident units over all arenas.
TEST(HostTier, ArenasArePopulatedAheadOfTheirBlocksWithinTheBudget) {
  constexpr uint64_t kUnit = HostTier::kUnit;
  HostTierOptions options;
  options.populate_ahead_bytes = 4 * kUnit;
  auto created = HostTier::Create(16 * kUnit, options);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  HostTier& tier = **created;
  auto within = [](std::chrono::seconds limit, auto done) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (!done() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return done();
  };
  // adjsnapd's own arena, from the start.
  EXPECT_TRUE(within(std::chrono::seconds(30), [&] { return tier.prefaulted() >= 4 * kUnit; }))
      << tier.prefaulted();
  const uint64_t before = tier.resident_bytes();
  ASSERT_TRUE(tier.ArenaFd(1001).ok());  // a solver's session asks for its arena
  EXPECT_TRUE(within(std::chrono::seconds(30),
                     [&] { return tier.resident_bytes() >= before + 4 * kUnit; }))
      << tier.resident_bytes();
  EXPECT_EQ(tier.used(), 0u);  // nothing was allocated: the pages were populated ahead
  // A block there needs no page of its own; the arena is then populated ahead past it.
  auto b = tier.AllocateIn(1001, 3 * kUnit);
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(within(std::chrono::seconds(30),
                     [&] { return tier.resident_bytes() >= before + 7 * kUnit; }))
      << tier.resident_bytes();
  // Five more users' arenas would want 20 more units: the budget (16) stops it.
  for (uint32_t uid = 1002; uid < 1007; ++uid) ASSERT_TRUE(tier.ArenaFd(uid).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_LE(tier.resident_bytes(), 16 * kUnit);
  EXPECT_GE(tier.resident_bytes(), 15 * kUnit);
}

// An arena that frees a block (its solver reads back, read-once) is not populated ahead until
// it allocates again: zeroing pages nobody will take held the backward pass's first fetches
// five times longer, on a core and a memory bus the copies needed. The populate-ahead thread is
// held after its first unit of the solver's arena while the block is taken and freed.
TEST(HostTier, AnArenaThatFreesABlockIsNotPopulatedAheadUntilItAllocatesAgain) {
  constexpr uint64_t kUnit = HostTier::kUnit;
  constexpr uint32_t kSolver = 1001;
  std::mutex mu;
  std::condition_variable cv;
  bool held = false, go = false;
  int solver_units = 0;
  HostTierOptions options;
  options.populate_ahead_bytes = 8 * kUnit;
  options.on_populated_ahead = [&](uint32_t arena, uint64_t) {
    if (arena != kSolver) return;
    std::unique_lock<std::mutex> lock(mu);
    ++solver_units;
    held = true;
    cv.notify_all();
    cv.wait(lock, [&] { return go; });
  };
  auto created = HostTier::Create(64 * kUnit, options);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  HostTier& tier = **created;
  auto within = [](auto done) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!done() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return done();
  };
  ASSERT_TRUE(within([&] { return tier.prefaulted() >= 8 * kUnit; })) << tier.prefaulted();
  ASSERT_TRUE(tier.ArenaFd(kSolver).ok());  // its session asks for the arena: ahead begins
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return held; }));
  }
  auto block = tier.AllocateIn(kSolver, kUnit);  // in the unit just populated
  ASSERT_TRUE(block.ok()) << block.status().ToString();
  block->reset();  // read back and freed: the arena reads now
  const uint64_t resident = tier.resident_bytes();
  {
    std::lock_guard<std::mutex> lock(mu);
    go = true;
  }
  cv.notify_all();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(tier.resident_bytes(), resident) << "populated ahead of an arena that reads back";
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(solver_units, 1);
  }
  // Its next forward pass: populated ahead again.
  auto next = tier.AllocateIn(kSolver, kUnit);
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_TRUE(within([&] { return tier.resident_bytes() >= resident + 7 * kUnit; }))
      << tier.resident_bytes();
}

TEST(HostTier, ASharedArenaHoldsEveryUidsBlocks) {
  HostTierOptions options;
  options.per_uid_arenas = false;
  auto tier = HostTier::Create(64 * 4096, options);
  ASSERT_TRUE(tier.ok());
  EXPECT_EQ((*tier)->ArenaFor(1001), (*tier)->own_arena());
  auto b = (*tier)->AllocateIn((*tier)->ArenaFor(1001), 4096);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ((*b)->arena(), static_cast<uint32_t>(geteuid()));
  EXPECT_EQ((*tier)->arena_fds().size(), 1u);
}

TEST(HostTier, RejectsABudgetBelowOnePage) {
  auto tier = HostTier::Create(100);
  ASSERT_FALSE(tier.ok());
  EXPECT_EQ(tier.status().code(), Code::kInvalidArgument);
}

// The start-up prefault populates every page of the memfd (what a fresh client then maps
// without the kernel allocating and zeroing it), and says so in prefaulted().
TEST(HostTier, ThePrefaultPopulatesTheWholeTier) {
  HostTierOptions options;
  options.huge_pages = HugePages::kOff;
  options.prefault = true;
  auto tier = HostTier::Create(64 << 20, options);
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  EXPECT_EQ((*tier)->pages(), "4 KiB pages");
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while ((*tier)->prefaulted() < (*tier)->budget() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ((*tier)->prefaulted(), (*tier)->budget());
  struct stat st {};
  ASSERT_EQ(fstat((*tier)->fd(), &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_blocks) * 512, (*tier)->budget());  // every page backed

  auto plain = HostTier::Create(64 << 20, HostTierOptions{HugePages::kOff, false});
  ASSERT_TRUE(plain.ok());
  ASSERT_EQ(fstat((*plain)->fd(), &st), 0);
  EXPECT_EQ(st.st_blocks, 0);  // without it the memfd is sparse: the budget is a ceiling
  EXPECT_EQ((*plain)->prefaulted(), 0u);
}

// Huge pages where the node has none: "hugetlb" refuses to start naming the pool and what it
// lacks; "auto" falls back to 4 KiB or shmem THP pages and says why not hugetlb.
TEST(HostTier, HugePagesAskedForWithoutAPoolAreRefusedOrFallBackSayingWhy) {
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  uint64_t free_huge = 0;
  while (std::getline(meminfo, line)) {
    if (line.rfind("HugePages_Free:", 0) == 0) free_huge = std::stoull(line.substr(15));
  }
  if (free_huge > 0) GTEST_SKIP() << "this node has a hugetlb pool with free pages";
  auto strict = HostTier::Create(64 << 20, HostTierOptions{HugePages::kHugeTlb, false});
  ASSERT_FALSE(strict.ok());
  EXPECT_EQ(strict.status().code(), Code::kResourceExhausted);
  EXPECT_NE(strict.status().message().find("host_huge_pages = \"hugetlb\""), std::string::npos)
      << strict.status().message();
  EXPECT_NE(strict.status().message().find("vm.nr_hugepages"), std::string::npos);
  auto fallback = HostTier::Create(64 << 20, HostTierOptions{HugePages::kAuto, false});
  ASSERT_TRUE(fallback.ok()) << fallback.status().ToString();
  const std::string& pages = (*fallback)->pages();
  EXPECT_TRUE(pages.rfind("shmem THP", 0) == 0 || pages.find("no hugetlb: the hugetlb pool has") !=
                                                      std::string::npos)
      << pages;
  auto block = (*fallback)->Allocate(1 << 20);  // and it serves
  ASSERT_TRUE(block.ok());
  std::memset((*block)->data(), 7, 1 << 20);
}

// "thp" puts the tier on a tmpfs mounted huge=always in a namespace of its own: a process
// new to the tier maps 2 MiB per fault, where 4 KiB pages take one fault per page.
TEST(HostTier, OnShmemThpAFreshProcessTakesOneFaultPerTwoMegabytes) {
  HostTierOptions thp;
  thp.huge_pages = HugePages::kThp;
  auto tier = HostTier::Create(64 << 20, thp);
  if (!tier.ok() && tier.status().message().find("unshare") != std::string::npos) {
    GTEST_SKIP() << "this node allows no mount namespace: " << tier.status().message();
  }
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  EXPECT_EQ((*tier)->pages(), "shmem THP (private tmpfs, huge=always)");
  struct statfs fs{};
  ASSERT_EQ(fstatfs((*tier)->fd(), &fs), 0);
  EXPECT_EQ(fs.f_type, TMPFS_MAGIC);
  auto block = (*tier)->Allocate(32 << 20);
  ASSERT_TRUE(block.ok());
  std::memset((*block)->data(), 7, 32 << 20);  // the daemon's own first touch
  if (!testing::kShadowMemory) {  // a sanitizer's shadow memory takes faults of its own
    long huge = FaultsOfAFreshProcessWriting((*tier)->fd(), (*tier)->budget(),
                                             (*block)->offset(), 32 << 20);
    EXPECT_GT(huge, 0);
    EXPECT_LT(huge, 64) << "32 MiB is 16 huge pages";
  }
  // A restart that takes the tier back from systemd's fd store says what backs it.
  auto adopted = HostTier::Adopt(dup((*tier)->fd()), (*tier)->budget());
  ASSERT_TRUE(adopted.ok()) << adopted.status().ToString();
  EXPECT_EQ((*adopted)->pages(), "shmem THP, kept through the restart");

  auto small = HostTier::Create(64 << 20, HostTierOptions{HugePages::kOff, false});
  ASSERT_TRUE(small.ok());
  auto b = (*small)->Allocate(32 << 20);
  ASSERT_TRUE(b.ok());
  std::memset((*b)->data(), 7, 32 << 20);
  if (!testing::kShadowMemory) {
    EXPECT_GE(FaultsOfAFreshProcessWriting((*small)->fd(), (*small)->budget(), (*b)->offset(),
                                           32 << 20),
              8192)
        << "4 KiB pages: one fault per page";
  }
  auto plain = HostTier::Adopt(dup((*small)->fd()), (*small)->budget());
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ((*plain)->pages(), "4 KiB pages, kept through the restart");
}

// host_tmpfs names the tmpfs to use (the systemd unit mounts one). "thp" refuses one that is
// missing, not a tmpfs, or not mounted huge=always, naming it; "auto" mounts its own instead.
TEST(HostTier, AHostTmpfsThatCannotGiveHugePagesIsNamed) {
  testing::TempDir tmp;
  struct statfs fs{};
  ASSERT_EQ(statfs(tmp.path().c_str(), &fs), 0);
  std::vector<std::pair<std::string, std::string>> cases = {
      {tmp.path() + "/missing", "No such file or directory"}};
  if (fs.f_type != TMPFS_MAGIC) cases.push_back({tmp.path(), "is not a tmpfs"});
  if (statfs("/dev/shm", &fs) == 0 && fs.f_type == TMPFS_MAGIC) {
    cases.push_back({"/dev/shm", "huge=always"});  // unless a node mounts it so (checked below)
  }
  for (const auto& [dir, why] : cases) {
    HostTierOptions options;
    options.huge_pages = HugePages::kThp;
    options.tmpfs_dir = dir;
    auto strict = HostTier::Create(8 << 20, options);
    if (strict.ok()) {
      EXPECT_EQ(dir, "/dev/shm") << (*strict)->pages();  // a node whose /dev/shm is huge
      continue;
    }
    EXPECT_EQ(strict.status().code(), Code::kInvalidArgument);
    EXPECT_NE(strict.status().message().find("host_tmpfs \"" + dir + "\""), std::string::npos)
        << strict.status().message();
    EXPECT_NE(strict.status().message().find(why), std::string::npos)
        << strict.status().message();
    options.huge_pages = HugePages::kAuto;
    auto fallback = HostTier::Create(8 << 20, options);
    ASSERT_TRUE(fallback.ok()) << fallback.status().ToString();
    auto block = (*fallback)->Allocate(1 << 20);  // and it serves
    ASSERT_TRUE(block.ok());
    std::memset((*block)->data(), 7, 1 << 20);
  }
}

// As root: a tmpfs mounted huge=always at host_tmpfs (as the unit's TemporaryFileSystem= does,
// here in a mount namespace of the test's own) is used; and a daemon without privileges still
// gets a private one, through a user namespace.
TEST(HostTier, ShmemThpWithAMountedTmpfsAndWithoutPrivileges) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to mount a tmpfs and to drop privileges";
  testing::TempDir tmp;
  std::string dir = tmp.path();
  std::string mounted = InAChild([&] {
    if (unshare(CLONE_NEWNS) != 0 ||
        mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        mount("t", dir.c_str(), "tmpfs", 0, "huge=always,mode=0700") != 0) {
      return std::string("mount: ") + std::strerror(errno);
    }
    HostTierOptions options;
    options.huge_pages = HugePages::kThp;
    options.tmpfs_dir = dir;
    auto tier = HostTier::Create(8 << 20, options);
    return tier.ok() ? (*tier)->pages() : tier.status().ToString();
  });
  EXPECT_EQ(mounted, "shmem THP (tmpfs " + dir + ", huge=always)");

  std::string unprivileged = InAChild([] {
    if (setgid(65534) != 0 || setuid(65534) != 0) return std::string("setuid failed");
    auto tier = HostTier::Create(8 << 20, HostTierOptions{HugePages::kThp, false});
    return tier.ok() ? (*tier)->pages() : tier.status().ToString();
  });
  if (unprivileged.find("unshare(CLONE_NEWUSER)") != std::string::npos) {
    GTEST_SKIP() << "this node allows no unprivileged user namespace: " << unprivileged;
  }
  EXPECT_EQ(unprivileged, "shmem THP (private tmpfs, huge=always)");
}


// A block allocated with its population left to the caller reports the fresh units it reached
// and leaves their pages unmade; PopulateUnits makes them, and the next block there finds them.
TEST(HostTier, ADeferredBlockReportsItsFreshUnitsAndPopulateUnitsMakesThem) {
  constexpr uint64_t kBlock = 2 * HostTier::kUnit;
  auto tier = std::move(HostTier::Create(8 * kBlock).value());
  auto pending = tier->AllocateDeferred(tier->own_arena(), kBlock);
  ASSERT_TRUE(pending.ok()) << pending.status().ToString();
  ASSERT_FALSE(pending->fresh.empty());
  EXPECT_EQ(pending->fresh.first(), 0u);
  EXPECT_EQ(pending->fresh.last(), 2u);
  EXPECT_EQ(tier->resident_bytes(), 0u);  // nothing populated on the allocating thread
  ASSERT_TRUE(tier->PopulateUnits(pending->fresh).ok());
  EXPECT_TRUE(pending->fresh.empty());
  EXPECT_GE(tier->resident_bytes(), kBlock);
  const uint64_t offset = pending->block->offset();
  pending->block.reset();
  // The freed units keep their pages: a block there has nothing to populate.
  auto again = tier->AllocateDeferred(tier->own_arena(), kBlock);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->block->offset(), offset);
  EXPECT_TRUE(again->fresh.empty());
}

// A unit whose population is still pending is fresh to every block that takes it, so no block
// reaches a client before its pages exist; and units left unpopulated (a push abandoned, a
// population that failed) are fresh again to the next block there.
TEST(HostTier, UnitsNotPopulatedYetAreFreshToTheNextBlockThere) {
  constexpr uint64_t kHalf = HostTier::kUnit / 2;
  auto tier = std::move(HostTier::Create(8 * HostTier::kUnit).value());
  auto first = tier->AllocateDeferred(tier->own_arena(), kHalf);
  ASSERT_TRUE(first.ok());
  auto second = tier->AllocateDeferred(tier->own_arena(), kHalf);  // the same unit, unpopulated
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->block->offset(), kHalf);
  ASSERT_FALSE(second->fresh.empty());
  EXPECT_EQ(second->fresh.first(), 0u);
  first->fresh = FreshUnits();  // dropped unpopulated; the second still populates the unit
  first->block.reset();
  second->fresh = FreshUnits();  // dropped too: nobody populated unit 0
  auto third = tier->AllocateDeferred(tier->own_arena(), kHalf);
  ASSERT_TRUE(third.ok());
  EXPECT_FALSE(third->fresh.empty());
  EXPECT_EQ(tier->resident_bytes(), 0u);
}

TEST(HostTier, APopulationThatFailsIsResourceExhaustedAndLeavesTheUnitsFresh) {
  HostTierOptions options;
  bool fail = true;
  options.on_populate = [&fail](uint32_t, uint64_t, uint64_t) { return !fail; };
  auto tier = std::move(HostTier::Create(8 * HostTier::kUnit, options).value());
  auto refused = tier->Allocate(HostTier::kUnit);  // the synchronous path populates the same way
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Code::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("populating 2.0 MiB"), std::string::npos)
      << refused.status().message();
  EXPECT_EQ(tier->used(), 0u);  // the block went back
  fail = false;
  auto pending = tier->AllocateDeferred(tier->own_arena(), HostTier::kUnit);
  ASSERT_TRUE(pending.ok());
  EXPECT_FALSE(pending->fresh.empty());  // unit 0 was never populated
  EXPECT_TRUE(tier->PopulateUnits(pending->fresh).ok());
}

}  // namespace
}  // namespace adjsnap
