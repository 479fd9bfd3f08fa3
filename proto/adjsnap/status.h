// adjsnap::Status and adjsnap::Result<T>: errors are values throughout adjsnapd.
//
// Codes share their numeric values with gRPC's status codes so the control plane maps them
// one to one. Thread-safety: immutable values, safe to share once constructed.
#pragma once

#include <cassert>
#include <exception>
#include <string>
#include <utility>
#include <variant>

namespace adjsnap {

enum class Code : int {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
  kUnauthenticated = 16,
};

// Name of a code as gRPC spells it ("NOT_FOUND"), for messages and --json output.
const char* CodeName(Code code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return {}; }
  static Status InvalidArgument(std::string m) { return {Code::kInvalidArgument, std::move(m)}; }
  static Status NotFound(std::string m) { return {Code::kNotFound, std::move(m)}; }
  static Status AlreadyExists(std::string m) { return {Code::kAlreadyExists, std::move(m)}; }
  static Status PermissionDenied(std::string m) { return {Code::kPermissionDenied, std::move(m)}; }
  static Status ResourceExhausted(std::string m) { return {Code::kResourceExhausted, std::move(m)}; }
  static Status FailedPrecondition(std::string m) {
    return {Code::kFailedPrecondition, std::move(m)};
  }
  static Status Aborted(std::string m) { return {Code::kAborted, std::move(m)}; }
  static Status OutOfRange(std::string m) { return {Code::kOutOfRange, std::move(m)}; }
  static Status Internal(std::string m) { return {Code::kInternal, std::move(m)}; }
  static Status Unavailable(std::string m) { return {Code::kUnavailable, std::move(m)}; }
  static Status DataLoss(std::string m) { return {Code::kDataLoss, std::move(m)}; }
  static Status Unauthenticated(std::string m) { return {Code::kUnauthenticated, std::move(m)}; }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  // "NOT_FOUND: run 'x' does not exist", or "OK".
  std::string ToString() const;

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

// What Result<T>::value() throws when there is no value: the Status, whose code and message
// say why ("UNAVAILABLE: adjsnapd is not running at ..."). adjsnap's own code tests ok() first;
// this is for callers who treat a failure as fatal, so that the reason is what they see.
class BadResultAccess : public std::exception {
 public:
  explicit BadResultAccess(Status status) : status_(std::move(status)), what_(status_.ToString()) {}
  const Status& status() const noexcept { return status_; }
  Code code() const noexcept { return status_.code(); }
  const char* what() const noexcept override { return what_.c_str(); }

 private:
  Status status_;
  std::string what_;
};

// A value or the Status explaining why there is none. value() (and * and ->) on a Result that
// holds a Status throws BadResultAccess carrying it.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design, like absl::StatusOr
  Result(Status status) : v_(std::move(status)) {  // NOLINT
    assert(!std::get<Status>(v_).ok() && "Result built from an OK status carries no value");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  Status status() const { return ok() ? Status::Ok() : std::get<Status>(v_); }
  T& value() & {
    CheckHasValue();
    return std::get<T>(v_);
  }
  const T& value() const& {
    CheckHasValue();
    return std::get<T>(v_);
  }
  T&& value() && {
    CheckHasValue();
    return std::get<T>(std::move(v_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }

 private:
  void CheckHasValue() const {
    if (!ok()) throw BadResultAccess(std::get<Status>(v_));
  }

  std::variant<T, Status> v_;
};

}  // namespace adjsnap

// Returns early from the enclosing function when `expr` yields a non-OK Status.
#define ADJSNAP_RETURN_IF_ERROR(expr)           \
  do {                                        \
    ::adjsnap::Status adjsnap_status_ = (expr);   \
    if (!adjsnap_status_.ok()) return adjsnap_status_; \
  } while (0)

#define ADJSNAP_CONCAT_INNER_(a, b) a##b
#define ADJSNAP_CONCAT_(a, b) ADJSNAP_CONCAT_INNER_(a, b)
// Declares `lhs` from a Result's value, or returns its Status from the enclosing function.
#define ADJSNAP_ASSIGN_OR_RETURN(lhs, expr) \
  ADJSNAP_ASSIGN_OR_RETURN_IMPL_(ADJSNAP_CONCAT_(adjsnap_result_, __LINE__), lhs, expr)
#define ADJSNAP_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()
