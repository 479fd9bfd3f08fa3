// Where the host tier's memory comes from (backing.h): a hugetlb memfd, a memfd on a huge=always
// tmpfs (private or the operator's), and what the kernel says about huge pages.
#include "host_tier/backing.h"

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

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "log.h"
#include "adjsnap/unix_socket.h"
#include "adjsnap/units.h"

namespace adjsnap {

// A number from /proc/meminfo ("HugePages_Free", "Hugepagesize" in kB); 0 if absent.
static uint64_t MemInfoNumber(const char* key) {
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
  int fd = memfd_create("adjsnap-host-tier", MFD_CLOEXEC | MFD_HUGETLB);
  if (fd < 0) return Status::Unavailable(std::string("memfd_create(MFD_HUGETLB): ") +
                                         std::strerror(errno));
  return Backing{fd, rounded, "hugetlb " + FormatBytes(page)};
}

// Writes `text` to `path` with plain system calls (safe in a child forked from threads).
static bool WriteProcFile(const char* path, const char* text) {
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
    if (mount("adjsnap-host-tier", dir, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
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
static std::string TmpfsHugeOption(int fd) {
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

}  // namespace adjsnap
