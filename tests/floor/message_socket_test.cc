// MessageSocket (proto/adjsnap/message_socket.h) over a real socketpair, driven by a real
// WorkerLoop: framing across partial writes, every way a session socket ends, and a callback
// that destroys its own socket.
#include "adjsnap/message_socket.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "adjsnap/wire.h"

namespace adjsnap {
namespace {

using namespace std::chrono_literals;

class MessageSocketTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto loop = ucx::WorkerLoop::Create("message-socket-test");
    ASSERT_TRUE(loop.ok()) << loop.status().ToString();
    loop_ = std::move(loop).value();
    loop_->Start("test-loop");
    int fds[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
    ours_ = ucx::ScopedFd(fds[0]);
    peer_ = ucx::ScopedFd(fds[1]);
  }
  void TearDown() override {
    OnLoop([this] { socket_.reset(); });
    loop_->Stop();
  }
  // Runs `f` on the loop thread and waits for it.
  void OnLoop(std::function<void()> f) {
    std::promise<void> done;
    loop_->Post([&] {
      f();
      done.set_value();
    });
    done.get_future().wait();
  }
  // Starts the socket under test on our end, recording what it delivers.
  void Start(MessageSocket::Limits limits = {}) {
    OnLoop([&] {
      auto s = MessageSocket::Start(
          loop_.get(), std::move(ours_), limits,
          [this](uint16_t op, const void* m, size_t n) {
            std::lock_guard<std::mutex> lock(mu_);
            got_.push_back({op, std::string(static_cast<const char*>(m), n)});
          },
          [this](const Status& why) {
            std::lock_guard<std::mutex> lock(mu_);
            ended_ = why;
          });
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      socket_ = std::move(s).value();
    });
  }
  static std::string Frame(uint16_t op, const std::string& body, uint32_t reserved = 0) {
    wire::SocketFrame f{op, static_cast<uint16_t>(body.size()), reserved};
    return std::string(reinterpret_cast<const char*>(&f), sizeof f) + body;
  }
  template <typename Pred>
  bool Eventually(Pred pred) {
    auto deadline = std::chrono::steady_clock::now() + 10s;
    while (std::chrono::steady_clock::now() < deadline) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (pred()) return true;
      }
      std::this_thread::sleep_for(1ms);
    }
    return false;
  }

  std::unique_ptr<ucx::WorkerLoop> loop_;
  ucx::ScopedFd ours_, peer_;
  std::unique_ptr<MessageSocket> socket_;  // loop thread
  std::mutex mu_;
  std::vector<std::pair<uint16_t, std::string>> got_;
  std::optional<Status> ended_;
};

TEST_F(MessageSocketTest, MessagesSplitAcrossWritesArriveWholeAndInOrder) {
  Start();
  std::string stream = Frame(5, std::string(56, 'a')) + Frame(6, "") + Frame(7, "xyz");
  for (char c : stream) {  // one byte at a time: every frame arrives in pieces
    ASSERT_EQ(::send(peer_.get(), &c, 1, MSG_NOSIGNAL), 1);
  }
  ASSERT_TRUE(Eventually([&] { return got_.size() == 3; }));
  std::lock_guard<std::mutex> lock(mu_);
  EXPECT_EQ(got_[0], std::make_pair(uint16_t{5}, std::string(56, 'a')));
  EXPECT_EQ(got_[1], std::make_pair(uint16_t{6}, std::string()));
  EXPECT_EQ(got_[2], std::make_pair(uint16_t{7}, std::string("xyz")));
  EXPECT_FALSE(ended_.has_value());
}

TEST_F(MessageSocketTest, WhatItSendsArrivesFramed) {
  Start();
  OnLoop([&] {
    EXPECT_TRUE(socket_->Send(4, "reply-one", 9));
    EXPECT_TRUE(socket_->Send(4, "two", 3));
  });
  std::string want = Frame(4, "reply-one") + Frame(4, "two");
  std::string got(want.size(), '\0');
  ASSERT_EQ(::recv(peer_.get(), got.data(), got.size(), MSG_WAITALL),
            static_cast<ssize_t>(want.size()));
  EXPECT_EQ(got, want);
}

TEST_F(MessageSocketTest, AFrameOverTheLimitOrWithReservedBitsEndsIt) {
  for (bool oversized : {true, false}) {
    SetUp();
    Start(MessageSocket::Limits{512, 1 << 20});
    std::string bad = oversized ? Frame(5, std::string(513, 'x')) : Frame(5, "abc", 1);
    ASSERT_EQ(::send(peer_.get(), bad.data(), bad.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(bad.size()));
    ASSERT_TRUE(Eventually([&] { return ended_.has_value(); }));
    std::lock_guard<std::mutex> lock(mu_);
    EXPECT_EQ(ended_->code(), Code::kInvalidArgument);
    EXPECT_NE(ended_->message().find("malformed frame"), std::string::npos) << ended_->ToString();
    EXPECT_TRUE(got_.empty());
    ended_.reset();
    OnLoop([this] { socket_.reset(); });
  }
}

TEST_F(MessageSocketTest, APeerThatClosesEndsItSayingWhereItStopped) {
  Start();
  std::string half = Frame(5, std::string(40, 'b')).substr(0, 20);
  ASSERT_EQ(::send(peer_.get(), half.data(), half.size(), MSG_NOSIGNAL), 20);
  peer_ = ucx::ScopedFd();
  ASSERT_TRUE(Eventually([&] { return ended_.has_value(); }));
  std::lock_guard<std::mutex> lock(mu_);
  EXPECT_EQ(ended_->code(), Code::kUnavailable);
  EXPECT_NE(ended_->message().find("closed by the peer inside a message (20 bytes of it)"),
            std::string::npos)
      << ended_->ToString();
}

TEST_F(MessageSocketTest, APeerThatDoesNotReadEndsItOnceTooMuchWaits) {
  Start(MessageSocket::Limits{512, 64 * 1024});
  bool sent_all = true;
  OnLoop([&] {
    std::string body(500, 'r');
    // Far more than the socket buffer and the queue take together.
    for (int i = 0; i < 20000 && sent_all; ++i) sent_all = socket_->Send(4, body.data(), 500);
  });
  EXPECT_FALSE(sent_all);
  std::lock_guard<std::mutex> lock(mu_);
  ASSERT_TRUE(ended_.has_value());
  EXPECT_EQ(ended_->code(), Code::kResourceExhausted);
  EXPECT_NE(ended_->message().find("does not read"), std::string::npos) << ended_->ToString();
}

TEST_F(MessageSocketTest, ACallbackMayDestroyItsOwnSocket) {
  OnLoop([&] {
    auto s = MessageSocket::Start(
        loop_.get(), std::move(ours_), {},
        [this](uint16_t, const void*, size_t) {
          std::lock_guard<std::mutex> lock(mu_);
          got_.push_back({0, "destroying"});
          socket_.reset();  // the rest of the batch is not delivered
        },
        [](const Status&) {});
    ASSERT_TRUE(s.ok());
    socket_ = std::move(s).value();
  });
  std::string two = Frame(5, "one") + Frame(5, "two");
  ASSERT_EQ(::send(peer_.get(), two.data(), two.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(two.size()));
  ASSERT_TRUE(Eventually([&] { return got_.size() == 1; }));
  std::this_thread::sleep_for(50ms);
  std::lock_guard<std::mutex> lock(mu_);
  EXPECT_EQ(got_.size(), 1u);
}

}  // namespace
}  // namespace adjsnap
