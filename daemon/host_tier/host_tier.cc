#include "host_tier/host_tier.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "log.h"
#include "snapd/unix_socket.h"
#include "snapd/units.h"

namespace snapd {

HostBlock::~HostBlock() { tier_->Free(arena_, offset_, size_); }

void HostBlock::ShrinkTo(uint64_t bytes) {
  uint64_t keep = (bytes + HostTier::kAlignment - 1) / HostTier::kAlignment * HostTier::kAlignment;
  if (keep == 0 || keep >= size_) return;
  tier_->Free(arena_, offset_ + keep, size_ - keep);
  size_ = keep;
}

namespace {

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14
#endif

// A number from /proc/meminfo ("HugePages_Free", "Hugepagesize" in kB); 0 if absent.
uint64_t MemInfoNumber(const char* key) {
  FILE* f = std::fopen("/proc/meminfo", "re");
  if (f == nullptr) return 0;
  char line[256];
  uint64_t value = 0;
  size_t n = std::strlen(key);
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::strncmp(line, key, n) == 0 && line[n] == ':') {
      value = std::strtoull(line + n + 1, nullptr, 10);
      break;
    }
  }
  std::fclose(f);
  return value;
}

// The kernel's shmem THP policy, the bracketed word of shmem_enabled ("never" if unknown).
std::string ShmemThpPolicy() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/shmem_enabled");
  std::string word;
  while (in >> word) {
    if (word.size() > 2 && word.front() == '[' && word.back() == ']') {
      return word.substr(1, word.size() - 2);
    }
  }
  return "never";
}

struct Backing {
  int fd = -1;
  uint64_t budget = 0;
  std::string pages;
};

// A hugetlb memfd of the budget rounded down to whole huge pages, when the pool has them free;
// else the reason why not.
Result<Backing> HugeTlbBacking(uint64_t budget) {
  uint64_t page = MemInfoNumber("Hugepagesize") * 1024;
  uint64_t free_pages = MemInfoNumber("HugePages_Free") - MemInfoNumber("HugePages_Rsvd");
  if (page == 0) return Status::Unavailable("this kernel has no hugetlb pages");
  uint64_t rounded = budget / page * page;
  if (rounded == 0 || free_pages * page < rounded) {
    return Status::ResourceExhausted(
        "the hugetlb pool has " + FormatBytes(free_pages * page) + " free of the " +
        FormatBytes(rounded) + " the host tier needs (vm.nr_hugepages; docs/operations.md)");
  }
  int fd = memfd_create("snapd-host-tier", MFD_CLOEXEC | MFD_HUGETLB);
  if (fd < 0) return Status::Unavailable(std::string("memfd_create(MFD_HUGETLB): ") +
                                         std::strerror(errno));
  return Backing{fd, rounded, "hugetlb " + FormatBytes(page)};
}

// Writes `text` to `path` with plain system calls (safe in a child forked from threads).
bool WriteProcFile(const char* path, const char* text) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ssize_t n = write(fd, text, std::strlen(text));
  close(fd);
  return n == static_cast<ssize_t>(std::strlen(text));
}

// The child's half of HugeTmpfsBacking: runs between fork and _exit, so it makes system calls
// only (the strings it needs were built before the fork). Sends the file's fd, or on failure
// the step that failed and its errno, over `sock`.
[[noreturn]] void MountHugeTmpfs(int sock, const char* uid_map, const char* gid_map) {
  auto fail = [sock](const char* step) {
    int err = errno;
    char msg[160];
    size_t n = std::strlen(step);
    std::memcpy(msg, step, n);
    msg[n++] = ':';
    msg[n++] = ' ';
    const char* why = strerrordesc_np(err);
    size_t m = why ? std::min(std::strlen(why), sizeof msg - n) : 0;
    std::memcpy(msg + n, why, m);
    (void)!send(sock, msg, n + m, MSG_NOSIGNAL);
    _exit(1);
  };
  // A mount namespace of the child's own. Without CAP_SYS_ADMIN, in a user namespace of its
  // own too, where this uid and gid map to themselves.
  if (unshare(CLONE_NEWNS) != 0) {
    if (errno != EPERM) fail("unshare(CLONE_NEWNS)");
    // A process that changed its uid (a daemon started as root that dropped privileges) is
    // not dumpable, and its /proc/self files then belong to root: uid_map could not be written.
    (void)prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
    if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) fail("unshare(CLONE_NEWUSER)");
    if (!WriteProcFile("/proc/self/uid_map", uid_map)) fail("writing uid_map");
    if (!WriteProcFile("/proc/self/setgroups", "deny") ||
        !WriteProcFile("/proc/self/gid_map", gid_map)) {
      fail("writing gid_map");
    }
  }
  // Nothing mounted here may propagate back to the node's namespace.
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) fail("making / private");
  // The tmpfs goes over a directory of this namespace only; size=0 is tmpfs's "no limit", as
  // for a memfd (the tier's budget is the limit, and a kept tier may grow on restart).
  const char* dirs[] = {"/tmp", "/run", "/dev/shm", "/mnt", "/"};
  for (const char* dir : dirs) {
    if (mount("snapd-host-tier", dir, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
              "huge=always,size=0,mode=0700") != 0) {
      continue;
    }
    int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) fail("O_TMPFILE on the private tmpfs");
    char byte = 0;
    if (SendWithFd(sock, &byte, 1, fd) != 1) fail("sending the tmpfs file");
    _exit(0);
  }
  fail("mounting a tmpfs with huge=always");
  _exit(1);
}

// A file on a tmpfs of the tier's own, mounted `huge=always` in a private mount namespace by
// a short-lived child. tmpfs's `huge=` mount option holds whatever the node's shmem_enabled
// says (that setting governs memfds and is "never" on many distributions), so the tier gets
// 2 MiB pages with neither a hugetlb pool nor root: without CAP_SYS_ADMIN the child mounts it
// in a user namespace of its own. The file has no name and its namespace ends with the child,
// so only the fd reaches it (the daemon's, and the clients' it is passed to).
Result<Backing> HugeTmpfsBacking(uint64_t budget) {
  char uid_map[64], gid_map[64];
  std::snprintf(uid_map, sizeof uid_map, "%u %u 1", geteuid(), geteuid());
  std::snprintf(gid_map, sizeof gid_map, "%u %u 1", getegid(), getegid());
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sv) != 0) {
    return Status::Unavailable(std::string("socketpair: ") + std::strerror(errno));
  }
  pid_t child = fork();
  if (child == 0) {
    close(sv[0]);
    MountHugeTmpfs(sv[1], uid_map, gid_map);
  }
  close(sv[1]);
  if (child < 0) {
    int err = errno;
    close(sv[0]);
    return Status::Unavailable(std::string("fork: ") + std::strerror(err));
  }
  char text[160];
  int fd = -1;
  ssize_t n = RecvWithFd(sv[0], text, sizeof text, 0, &fd);
  close(sv[0]);
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (fd < 0) {
    return Status::Unavailable(
        "no private tmpfs with huge pages: " +
        (n > 0 ? std::string(text, static_cast<size_t>(n)) : std::string("the child failed")));
  }
  return Backing{fd, budget, "shmem THP (private tmpfs, huge=always)"};
}

// The `huge=` option of the tmpfs holding `fd`, from /proc/self/mountinfo ("never" when the
// mount names none, "" when the mount is not found).
std::string TmpfsHugeOption(int fd) {
  struct stat st{};
  if (fstat(fd, &st) != 0) return "";
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  const std::string dev = std::to_string(major(st.st_dev)) + ":" + std::to_string(minor(st.st_dev));
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string id, parent, devno;
    fields >> id >> parent >> devno;
    if (devno != dev) continue;
    size_t dash = line.find(" - ");
    if (dash == std::string::npos) return "";
    std::istringstream tail(line.substr(dash + 3));
    std::string type, source, options;
    tail >> type >> source >> options;
    for (size_t at = 0; at < options.size();) {
      size_t comma = options.find(',', at);
      std::string option = options.substr(at, comma - at);
      if (option.rfind("huge=", 0) == 0) return option.substr(5);
      if (comma == std::string::npos) break;
      at = comma + 1;
    }
    return "never";
  }
  return "";
}

// A nameless file on the tmpfs an operator mounted at `dir` (config `host_tmpfs`; the systemd
// unit's TemporaryFileSystem= with huge=always, docs/install.md); INVALID_ARGUMENT naming the
// directory when it is missing, not a tmpfs, or not mounted huge=always.
Result<Backing> TmpfsDirBacking(const std::string& dir, uint64_t budget) {
  int fd = open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {
    return Status::InvalidArgument("host_tmpfs \"" + dir + "\": " + std::strerror(errno));
  }
  struct statfs fs{};
  if (fstatfs(fd, &fs) != 0 || fs.f_type != TMPFS_MAGIC) {
    close(fd);
    return Status::InvalidArgument("host_tmpfs \"" + dir + "\" is not a tmpfs");
  }
  std::string huge = TmpfsHugeOption(fd);
  if (huge != "always" && huge != "within_size") {
    close(fd);
    return Status::InvalidArgument("host_tmpfs \"" + dir + "\" is not mounted with huge=always");
  }
  return Backing{fd, budget, "shmem THP (tmpfs " + dir + ", huge=" + huge + ")"};
}

// Sizes `fd` to `bytes` (closing it on error).
Status SizeArena(int fd, uint64_t bytes) {
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    int err = errno;
    close(fd);
    return Status::ResourceExhausted("sizing a host-tier arena to " + FormatBytes(bytes) +
                                     " failed: " + std::strerror(err));
  }
  return Status::Ok();
}

}  // namespace

HostTier::HostTier(uint64_t budget, std::string pages, Kind kind, ArenaId own,
                   const HostTierOptions& options)
    : budget_(budget),
      units_((budget + kUnit - 1) / kUnit),
      pages_(std::move(pages)),
      kind_(kind),
      own_(own),
      per_uid_(options.per_uid_arenas),
      options_(options) {
  if (!options.prefault) release_after_ = options.release_after;
}

Result<std::unique_ptr<HostTier>> HostTier::Create(uint64_t budget_bytes,
                                                   const HostTierOptions& options) {
  uint64_t budget = budget_bytes / kAlignment * kAlignment;
  if (budget == 0) {
    return Status::InvalidArgument("host-tier budget " + std::to_string(budget_bytes) +
                                   " bytes is below one page; set host_mem or host_mem_perc");
  }
  Backing b;
  Kind kind = Kind::kMemfd;
  std::string not_huge;
  if (options.huge_pages == HugePages::kAuto || options.huge_pages == HugePages::kHugeTlb) {
    auto huge = HugeTlbBacking(budget);
    if (huge.ok()) {
      b = *huge;
      kind = Kind::kHugeTlb;
    } else if (options.huge_pages == HugePages::kHugeTlb) {
      return Status::ResourceExhausted("host_huge_pages = \"hugetlb\": " +
                                       huge.status().message());
    } else {
      not_huge = "no hugetlb: " + huge.status().message();
    }
  }
  if (b.fd < 0 && !options.tmpfs_dir.empty() && options.huge_pages != HugePages::kOff) {
    // The systemd unit mounts it; a daemon started otherwise with the same file goes on to
    // the private mount below, saying why.
    auto dir = TmpfsDirBacking(options.tmpfs_dir, budget);
    if (dir.ok()) {
      b = *dir;
      kind = Kind::kTmpfsDir;
    } else {
      std::string why = dir.status().message();
      if (options.huge_pages == HugePages::kThp) {
        return Status::InvalidArgument("host_huge_pages = \"thp\": " + why);
      }
      SNAPD_LOG_WARN("host tier: %s; mounting a tmpfs of its own instead", why.c_str());
      not_huge += "; " + why;
    }
  }
  if (b.fd < 0 &&
      (options.huge_pages == HugePages::kAuto || options.huge_pages == HugePages::kThp)) {
    auto thp = HugeTmpfsBacking(budget);
    if (thp.ok()) {
      b = *thp;
      kind = Kind::kPrivateTmpfs;
    } else if (options.huge_pages == HugePages::kThp) {
      return Status::Unavailable("host_huge_pages = \"thp\": " + thp.status().message());
    } else {
      not_huge += "; " + thp.status().message();
    }
  }
  if (b.fd < 0) {
    // A sparse memfd: the budget is a ceiling, not an up-front commitment.
    b.fd = memfd_create("snapd-host-tier", MFD_CLOEXEC);
    if (b.fd < 0) return Status::Internal(std::string("memfd_create: ") + std::strerror(errno));
    b.budget = budget;
    b.pages = "4 KiB pages";
    if (options.huge_pages == HugePages::kAuto) {
      // Shmem THP advice on a memfd: effective when the kernel's shmem_enabled policy allows
      // it. The advice is set on snapd's mapping, which populates every page (Populate).
      std::string policy = ShmemThpPolicy();
      bool thp = policy != "never" && policy != "deny";
      b.pages = thp ? "shmem THP (" + policy + ")"
                    : "4 KiB pages (" + not_huge + "; shmem THP: " + policy + ")";
    }
  }
  SNAPD_RETURN_IF_ERROR(SizeArena(b.fd, b.budget));
  std::unique_ptr<HostTier> tier(new HostTier(b.budget, b.pages, kind, geteuid(), options));
  {
    MutexLock lock(tier->mu_);
    SNAPD_RETURN_IF_ERROR(tier->AddArena(tier->own_, b.fd, /*adopted=*/false));
  }
  if (options.prefault) tier->prefault_ = std::thread([t = tier.get()] { t->Prefault(); });
  if (options.populate_ahead_bytes > 0) {
    tier->ahead_ = std::thread([t = tier.get()] { t->PopulateAhead(); });
    MutexLock lock(tier->mu_);
    tier->WantAhead(tier->own_);
  }
  tier->StartRelease();
  return tier;
}

Result<std::unique_ptr<HostTier>> HostTier::AdoptArenas(std::map<ArenaId, int> fds,
                                                        uint64_t budget_bytes,
                                                        const HostTierOptions& options) {
  auto close_all = [&fds] {
    for (auto& [id, fd] : fds) close(fd);
  };
  uint64_t budget = budget_bytes / kAlignment * kAlignment;
  if (budget == 0 || fds.empty()) {
    close_all();
    return Status::InvalidArgument(budget == 0 ? "host-tier budget is below one page"
                                               : "no host-tier arena to take back");
  }
  // What backs them is the previous start's choice: a hugetlb memfd, a file on a tmpfs mounted
  // huge=always (whose st_blksize is the 2 MiB page) or a plain memfd.
  struct stat st{};
  struct statfs fs{};
  const int first = fds.begin()->second;
  std::string pages = "4 KiB pages, kept through the restart";
  Kind kind = Kind::kMemfd;
  if (fstat(first, &st) == 0 && fstatfs(first, &fs) == 0 && fs.f_type == HUGETLBFS_MAGIC) {
    pages = "hugetlb " + FormatBytes(static_cast<uint64_t>(st.st_blksize)) +
            ", kept through the restart";
    kind = Kind::kHugeTlb;
  } else if (fs.f_type == TMPFS_MAGIC && st.st_blksize > static_cast<blksize_t>(kAlignment)) {
    pages = "shmem THP, kept through the restart";
    kind = options.tmpfs_dir.empty() ? Kind::kPrivateTmpfs : Kind::kTmpfsDir;
  }
  std::unique_ptr<HostTier> tier(new HostTier(budget, pages, kind, geteuid(), options));
  MutexLock lock(tier->mu_);
  while (!fds.empty()) {
    auto [id, fd] = *fds.begin();
    fds.erase(fds.begin());  // each step below takes `fd` over, or closes it on error
    Status taken = fstat(fd, &st) == 0
                       ? Status::Ok()
                       : Status::InvalidArgument("fstat of the kept host-tier arena of uid " +
                                                 std::to_string(id) + ": " + std::strerror(errno));
    if (!taken.ok()) close(fd);
    if (taken.ok() && static_cast<uint64_t>(st.st_size) != budget) taken = SizeArena(fd, budget);
    if (taken.ok()) taken = tier->AddArena(id, fd, /*adopted=*/true);
    if (!taken.ok()) {
      close_all();
      return taken;
    }
  }
  if (options.populate_ahead_bytes > 0) {
    tier->ahead_ = std::thread([t = tier.get()] { t->PopulateAhead(); });
  }
  return tier;
}

Result<std::unique_ptr<HostTier>> HostTier::Adopt(int fd, uint64_t budget_bytes,
                                                  const HostTierOptions& options) {
  return AdoptArenas({{geteuid(), fd}}, budget_bytes, options);
}

Result<int> HostTier::NewBacking() const {
  int fd = -1;
  switch (kind_) {
    case Kind::kHugeTlb:
      fd = memfd_create("snapd-host-tier", MFD_CLOEXEC | MFD_HUGETLB);
      break;
    case Kind::kTmpfsDir: {
      SNAPD_ASSIGN_OR_RETURN(Backing b, TmpfsDirBacking(options_.tmpfs_dir, budget_));
      fd = b.fd;
      break;
    }
    case Kind::kPrivateTmpfs: {
      SNAPD_ASSIGN_OR_RETURN(Backing b, HugeTmpfsBacking(budget_));
      fd = b.fd;
      break;
    }
    case Kind::kMemfd:
      fd = memfd_create("snapd-host-tier", MFD_CLOEXEC);
      break;
  }
  if (fd < 0) {
    return Status::Unavailable(std::string("a new host-tier arena: ") + std::strerror(errno));
  }
  SNAPD_RETURN_IF_ERROR(SizeArena(fd, budget_));
  return fd;
}

Status HostTier::AddArena(ArenaId id, int fd, bool adopted) {
  // hugetlb: no reservation of the whole budget per arena; snapd populates each block's pages
  // before handing it out, and fails the allocation cleanly when the pool has none left.
  int flags = MAP_SHARED | (kind_ == Kind::kHugeTlb ? MAP_NORESERVE : 0);
  void* base = mmap(nullptr, budget_, PROT_READ | PROT_WRITE, flags, fd, 0);
  if (base == MAP_FAILED) {
    int err = errno;
    close(fd);
    return Status::ResourceExhausted("mapping " + FormatBytes(budget_) +
                                     " for the host-tier arena of uid " + std::to_string(id) +
                                     " failed: " + std::strerror(err));
  }
  if (kind_ != Kind::kHugeTlb) (void)madvise(base, budget_, MADV_HUGEPAGE);
  auto a = std::make_unique<Arena>(budget_);
  a->id = id;
  a->fd = fd;
  a->base = base;
  a->unit_used.assign(units_, 0);
  a->resident.assign(units_, false);
  a->populating.assign(units_, false);
  if (adopted) {
    // The units where the kept memfd holds pages (SEEK_DATA/SEEK_HOLE), counted resident.
    for (off_t at = 0; at < static_cast<off_t>(budget_);) {
      off_t data = lseek(fd, at, SEEK_DATA);
      if (data < 0) break;
      off_t hole = lseek(fd, data, SEEK_HOLE);
      if (hole < 0) hole = static_cast<off_t>(budget_);
      for (uint64_t u = static_cast<uint64_t>(data) / kUnit;
           u < units_ && u * kUnit < static_cast<uint64_t>(hole); ++u) {
        if (!a->resident[u]) ++resident_units_;
        a->resident[u] = true;
      }
      at = hole;
    }
  }
  arenas_.emplace(id, std::move(a));
  return Status::Ok();
}

Result<HostTier::Arena*> HostTier::ArenaLocked(ArenaId id) {
  if (auto it = arenas_.find(id); it != arenas_.end()) return it->second.get();
  if (stopping_) return Status::Unavailable("the host tier is stopping");
  SNAPD_ASSIGN_OR_RETURN(int fd, NewBacking());
  SNAPD_RETURN_IF_ERROR(AddArena(id, fd, /*adopted=*/false));
  SNAPD_LOG_INFO("host tier: a new arena for uid %u (%s)", id, pages_.c_str());
  WantAhead(id);  // its solver connects now and pushes soon
  return arenas_.at(id).get();
}

void HostTier::CountUnits(Arena& a, uint64_t offset, uint64_t size, bool add,
                          uint64_t* fresh_first, uint64_t* fresh_last) {
  const uint64_t end = offset + size;
  for (uint64_t u = offset / kUnit; u < units_ && u * kUnit < end; ++u) {
    uint64_t overlap = std::min(end, (u + 1) * kUnit) - std::max(offset, u * kUnit);
    if (!add) {
      a.unit_used[u] -= static_cast<uint32_t>(overlap);
      continue;
    }
    a.unit_used[u] += static_cast<uint32_t>(overlap);
    // A unit being populated ahead is populated here too: no page of the block may be left to
    // the client's first touch.
    if (!a.resident[u] || a.populating[u]) {
      if (!a.resident[u]) ++resident_units_;
      a.resident[u] = true;
      if (fresh_first != nullptr) {
        if (*fresh_first >= *fresh_last) *fresh_first = u;
        *fresh_last = u + 1;
      }
    }
  }
}

bool HostTier::PunchUnit(Arena& a, uint64_t u) {
  uint64_t at = u * kUnit, n = std::min(kUnit, budget_ - at);
  if (fallocate(a.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(at),
                static_cast<off_t>(n)) != 0) {
    return false;
  }
  if (a.resident[u]) --resident_units_;
  a.resident[u] = false;
  return true;
}

void HostTier::MakeResidentRoom(const Arena& keep) {
  // An adopted tier's free ranges may hold kept steps until they are claimed (StartRelease).
  if (resident_units_ <= units_ || !releasing_) return;
  for (int pass = 0; pass < 2; ++pass) {
    for (auto& [id, a] : arenas_) {
      if ((a.get() == &keep) != (pass == 1)) continue;
      for (uint64_t u = 0; u < units_; ++u) {
        if (resident_units_ <= units_) return;
        if (a->resident[u] && a->unit_used[u] == 0 && !a->populating[u] && !PunchUnit(*a, u)) {
          return;
        }
      }
    }
  }
}

bool HostTier::Populate(const Arena& a, uint64_t first, uint64_t last) const {
  uint64_t at = first * kUnit, end = std::min(last * kUnit, budget_);
  if (at >= end) return true;
  // A write populate from snapd's own mapping: the pages are charged to snapd, and on shmem
  // with THP advice they are allocated as the mapping's advice says.
  auto populate = [&a](uint64_t from, uint64_t to) {
    char* p = static_cast<char*>(a.base) + from;
    if (madvise(p, to - from, MADV_POPULATE_WRITE) == 0) return true;
    if (errno == EINVAL) {  // a kernel before 5.14: allocate them in the file instead
      return fallocate(a.fd, FALLOC_FL_KEEP_SIZE, static_cast<off_t>(from),
                       static_cast<off_t>(to - from)) == 0;
    }
    return false;
  };
  // The kernel allocates and zeroes each page: a large range goes faster in stripes on a few
  // threads, as a client's copy threads would have touched it.
  constexpr uint64_t kStripeMin = 8 * kUnit;
  const uint64_t cores = std::max(1u, std::thread::hardware_concurrency());
  const uint64_t stripes = std::min<uint64_t>({4, cores, (end - at) / kStripeMin});
  if (stripes <= 1) return populate(at, end);
  const uint64_t units = (end - at + kUnit - 1) / kUnit, per = (units + stripes - 1) / stripes;
  std::atomic<int> failed{0};  // the errno of a stripe that failed
  std::vector<std::thread> helpers;
  for (uint64_t i = 1; i < stripes; ++i) {
    uint64_t from = at + i * per * kUnit, to = std::min(end, from + per * kUnit);
    if (from >= to) break;
    helpers.emplace_back([&, from, to] {
      if (!populate(from, to)) failed = errno;
    });
  }
  if (!populate(at, std::min(end, at + per * kUnit))) failed = errno;
  for (auto& t : helpers) t.join();
  errno = failed.load();  // for the caller's message
  return failed.load() == 0;
}

std::unique_ptr<HostBlock> HostTier::NewBlock(Arena& a, uint64_t offset, uint64_t size) {
  last_allocation_ = std::chrono::steady_clock::now();
  used_ += size;
  peak_used_ = std::max(peak_used_, used_);
  return std::make_unique<HostBlock>(this, a.id, offset, size,
                                     static_cast<char*>(a.base) + offset);
}

Result<std::unique_ptr<HostBlock>> HostTier::Claim(ArenaId arena, uint64_t offset,
                                                   uint64_t bytes) {
  uint64_t size = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  MutexLock lock(mu_);
  auto it = arenas_.find(arena);
  if (it == arenas_.end()) {
    return Status::InvalidArgument("no host-tier arena of uid " + std::to_string(arena) +
                                   " was kept");
  }
  Arena& a = *it->second;
  if (offset % kAlignment != 0 || size == 0 || used_ + size > budget_ ||
      !a.ranges.AllocateAt(offset, size)) {
    return Status::InvalidArgument(
        "host-tier range at " + std::to_string(offset) + " of " + std::to_string(size) +
        " bytes is not free in the arena of uid " + std::to_string(arena) + " of a tier of " +
        FormatBytes(budget_));
  }
  CountUnits(a, offset, size, /*add=*/true, nullptr, nullptr);
  return NewBlock(a, offset, size);
}

Result<std::unique_ptr<HostBlock>> HostTier::AllocateIn(ArenaId arena, uint64_t bytes,
                                                        bool from_top) {
  if (bytes == 0) return Status::InvalidArgument("host-tier allocation of 0 bytes");
  uint64_t size = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  std::unique_ptr<HostBlock> block;
  const Arena* a = nullptr;
  uint64_t first = 0, last = 0;
  {
    MutexLock lock(mu_);
    // No room in the budget: refused before an arena is made for it.
    Arena* found = nullptr;
    if (used_ + size <= budget_) {
      SNAPD_ASSIGN_OR_RETURN(found, ArenaLocked(arena));
    }
    std::optional<uint64_t> offset;
    if (found != nullptr) offset = found->ranges.Allocate(size, from_top);
    if (!offset) {
      std::string why = used_ + size > budget_ ? "" : " (free space is fragmented)";
      return Status::ResourceExhausted("host tier full: " + FormatBytes(bytes) + " requested, " +
                                       FormatBytes(used_) + " of " + FormatBytes(budget_) +
                                       " in use" + why +
                                       "; delete finished runs or raise host_mem");
    }
    CountUnits(*found, *offset, size, /*add=*/true, &first, &last);
    if (last > first) MakeResidentRoom(*found);
    WantAhead(arena);
    block = NewBlock(*found, *offset, size);
    a = found;
  }
  // Outside the lock: the units are in use, so nothing gives them back meanwhile.
  if (last > first && !Populate(*a, first, last)) {
    int err = errno;
    return Status::ResourceExhausted("host tier: populating " + FormatBytes(size) +
                                     " for uid " + std::to_string(arena) + " failed: " +
                                     std::strerror(err));  // the block goes back as it goes
  }
  return block;
}

void HostTier::Free(ArenaId arena, uint64_t offset, uint64_t size) {
  MutexLock lock(mu_);
  Arena& a = *arenas_.at(arena);
  used_ -= size;
  a.ranges.Free(offset, size);
  CountUnits(a, offset, size, /*add=*/false, nullptr, nullptr);
  freed_since_release_ = true;
}

HostTier::~HostTier() {
  StopBackgroundWork();
  MutexLock lock(mu_);
  for (auto& [id, a] : arenas_) {
    munmap(a->base, budget_);
    close(a->fd);
  }
}

// Populates snapd's own arena unit by unit, as AllocateIn would, up to the budget's worth of
// resident units: a unit not yet populated is allocated and zeroed now instead of in a push.
// Each unit is populated outside the lock, as the populate-ahead does (ClaimUnit, FillUnit).
void HostTier::Prefault() {
  for (uint64_t u = 0; u < units_ && !stopping_; ++u) {
    Arena* own = nullptr;
    bool claimed = false;
    {
      MutexLock lock(mu_);
      own = arenas_.at(own_).get();
      if (!own->resident[u] && resident_units_ >= units_) break;  // the budget's worth is
      claimed = ClaimUnit(*own, u);
    }
    if (claimed && !FillUnit(*own, u)) {
      SNAPD_LOG_WARN("host-tier prefault stopped at %s of %s: %s (pages will be populated as "
                     "blocks are handed out)",
                     FormatBytes(u * kUnit).c_str(), FormatBytes(budget_).c_str(),
                     std::strerror(errno));
      return;
    }
    prefaulted_.store(std::min(budget_, (u + 1) * kUnit), std::memory_order_relaxed);
  }
  if (!stopping_) {
    SNAPD_LOG_INFO("host tier prefaulted: %s of %s", FormatBytes(prefaulted()).c_str(),
                   pages_.c_str());
  }
}

bool HostTier::ClaimUnit(Arena& a, uint64_t u) {
  if (a.resident[u] || resident_units_ >= units_) return false;
  a.resident[u] = true;
  a.populating[u] = true;
  ++resident_units_;
  return true;
}

bool HostTier::FillUnit(Arena& a, uint64_t u) {
  bool ok = Populate(a, u, u + 1);
  int err = errno;
  MutexLock lock(mu_);
  a.populating[u] = false;
  if (ok) {
    // Pages nobody takes go back once the tier has been idle for release_after, as freed ones
    // do: a node no solver comes to holds no more than its runs store.
    freed_since_release_ = true;
  } else if (a.unit_used[u] == 0) {  // nobody took it meanwhile: not resident after all
    a.resident[u] = false;
    --resident_units_;
  }
  errno = err;
  return ok;
}

void HostTier::WantAhead(ArenaId arena) {
  if (options_.populate_ahead_bytes == 0 || stopping_) return;
  if (std::find(want_ahead_.begin(), want_ahead_.end(), arena) == want_ahead_.end()) {
    want_ahead_.push_back(arena);
  }
  ahead_cv_.NotifyAll();
}

void HostTier::PopulateAhead() {
  const uint64_t ahead = std::max<uint64_t>(1, options_.populate_ahead_bytes / kUnit);
  for (;;) {
    Arena* a = nullptr;
    uint64_t unit = 0;
    {
      MutexLock lock(mu_);
      // The next unit to populate: above the highest unit in use of an arena that asked, up
      // to `ahead` units, while all arenas' resident units stay within the budget.
      while (a == nullptr) {
        ahead_cv_.Wait(mu_, [this]() SNAPD_REQUIRES(mu_) {
          return stopping_ || !want_ahead_.empty();
        });
        if (stopping_) return;
        Arena& candidate = *arenas_.at(want_ahead_.front());
        uint64_t top = units_;
        while (top > 0 && candidate.unit_used[top - 1] == 0) --top;
        for (uint64_t u = top; u < std::min(units_, top + ahead); ++u) {
          if (!candidate.resident[u]) {
            a = &candidate;
            unit = u;
            break;
          }
        }
        if (a == nullptr || !ClaimUnit(*a, unit)) {
          a = nullptr;
          want_ahead_.erase(want_ahead_.begin());  // ahead enough (or the budget is)
        }
      }
    }
    // Outside the lock, so pushes never wait for it.
    if (FillUnit(*a, unit)) {
      prefaulted_.fetch_add(std::min(kUnit, budget_ - unit * kUnit), std::memory_order_relaxed);
      continue;
    }
    int err = errno;
    MutexLock lock(mu_);
    want_ahead_.clear();
    SNAPD_LOG_WARN("host tier: populating ahead in the arena of uid %u failed: %s (pages are "
                   "populated as blocks are handed out)",
                   a->id, std::strerror(err));
  }
}

uint64_t HostTier::ReleaseFree() {
  constexpr uint64_t kPiece = (64ull << 20) / kUnit;  // the lock is held for one piece at a time
  std::vector<ArenaId> ids;
  {
    MutexLock lock(mu_);
    for (auto& [id, a] : arenas_) ids.push_back(id);
    freed_since_release_ = false;
  }
  uint64_t released = 0;
  for (ArenaId id : ids) {
    for (uint64_t u = 0; u < units_ && !stopping_; u += kPiece) {
      MutexLock lock(mu_);
      Arena& a = *arenas_.at(id);
      for (uint64_t i = u; i < std::min(units_, u + kPiece); ++i) {
        if (a.unit_used[i] != 0 || a.populating[i]) continue;  // in use: its pages stay
        if (!PunchUnit(a, i)) {
          SNAPD_LOG_WARN("giving free host-tier memory back to the OS failed: %s (it stays "
                         "resident, and is reused)",
                         std::strerror(errno));
          return released;
        }
        released += std::min(kUnit, budget_ - i * kUnit);
      }
    }
  }
  return released;
}

void HostTier::ReleaseWhenIdle(std::chrono::seconds release_after) {
  for (;;) {
    {
      MutexLock lock(mu_);
      for (;;) {
        if (stopping_) return;
        auto now = std::chrono::steady_clock::now();
        auto due = last_allocation_ + release_after;
        if (freed_since_release_ && now >= due) break;
        // Woken by the destructor, or to look again when the idle time may be up (nothing
        // freed yet: one interval from now).
        stop_cv_.WaitUntil(mu_, freed_since_release_ ? due : now + release_after,
                           [this] { return stopping_.load(); });
      }
    }
    uint64_t before = resident_bytes();
    ReleaseFree();
    uint64_t after = resident_bytes();
    if (before > after) {
      SNAPD_LOG_INFO("host tier idle for %lld s: gave %s of free memory back to the OS (%s "
                     "resident, %s in use)",
                     static_cast<long long>(release_after.count()),
                     FormatBytes(before - after).c_str(), FormatBytes(after).c_str(),
                     FormatBytes(used()).c_str());
    }
  }
}

void HostTier::StopBackgroundWork() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  stop_cv_.NotifyAll();
  ahead_cv_.NotifyAll();
  if (prefault_.joinable()) prefault_.join();
  if (ahead_.joinable()) ahead_.join();
  if (releaser_.joinable()) releaser_.join();
}

void HostTier::StartRelease() {
  {
    MutexLock lock(mu_);
    if (releasing_ || stopping_) return;
    releasing_ = true;  // kept steps are claimed: free units may be given back
    last_allocation_ = std::chrono::steady_clock::now();  // idle time counts from now
  }
  if (release_after_.count() > 0) {
    releaser_ = std::thread([this] { ReleaseWhenIdle(release_after_); });
  }
}

uint64_t HostTier::resident_bytes() const {
  MutexLock lock(mu_);
  uint64_t bytes = 0;
  struct stat st{};
  for (auto& [id, a] : arenas_) {
    if (fstat(a->fd, &st) == 0) bytes += static_cast<uint64_t>(st.st_blocks) * 512;
  }
  return bytes;
}

uint64_t HostTier::largest_free(ArenaId arena) const {
  MutexLock lock(mu_);
  uint64_t room = budget_ - used_;
  auto it = arenas_.find(arena);
  // An arena not made yet is one free range of the whole budget.
  return it == arenas_.end() ? room : std::min(room, it->second->ranges.largest_free());
}

uint64_t HostTier::used() const {
  MutexLock lock(mu_);
  return used_;
}

uint64_t HostTier::peak_used() const {
  MutexLock lock(mu_);
  return peak_used_;
}

Result<std::pair<int, uint64_t>> HostTier::ArenaFd(ArenaId arena) {
  MutexLock lock(mu_);
  SNAPD_ASSIGN_OR_RETURN(Arena * a, ArenaLocked(arena));
  return std::make_pair(a->fd, budget_);
}

int HostTier::fd() const {
  MutexLock lock(mu_);
  auto it = arenas_.find(own_);
  return it == arenas_.end() ? -1 : it->second->fd;
}

std::map<HostTier::ArenaId, int> HostTier::arena_fds() const {
  MutexLock lock(mu_);
  std::map<ArenaId, int> fds;
  for (auto& [id, a] : arenas_) fds.emplace(id, a->fd);
  return fds;
}

}  // namespace snapd
