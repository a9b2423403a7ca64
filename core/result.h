// Errors as values. Every fallible public API in Kiln returns Result<T> or
// Status; the message is meant for a user, so it says what went wrong and
// where (file, node, attribute) in one line.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>

namespace kiln {

/// What a front end may do about an error besides showing it. Almost every
/// error is kOther; the rest are what a caller acts on without reading the
/// message (kiln-studio asks for input shapes, a cancelled compile is not
/// reported as a failure).
enum class ErrorKind {
  kOther,
  kCancelled,           ///< the caller asked to stop (CompileObserver, Cancel)
  kInputShapesMissing,  ///< a model file that records no input shapes, and none were given
};

/// A user-facing error: one line, says what and where.
struct Error {
  std::string message;
  ErrorKind kind = ErrorKind::kOther;

  /// The same error with `prefix` in front of its message ("model.pt: ...").
  Error prefixed(const std::string& prefix) const { return {prefix + message, kind}; }
};

/// Exception used *inside* parsers and importers where unwinding is the
/// simplest control flow; always converted to an Error at the public API.
class KilnException : public std::runtime_error {
 public:
  explicit KilnException(const std::string& message, ErrorKind kind = ErrorKind::kOther)
      : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

/// Throw a KilnException with the given message.
[[noreturn]] inline void fail(const std::string& message, ErrorKind kind = ErrorKind::kOther) {
  throw KilnException(message, kind);
}

/// Either a T or an Error.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}
  Result(Error e) : v_(std::move(e)) {}
  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  const Error& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

/// Success or an Error.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error e) : err_(std::move(e)) {}
  static Status Ok() { return {}; }
  bool ok() const { return !err_.has_value(); }
  explicit operator bool() const { return ok(); }
  const Error& error() const { return *err_; }

 private:
  std::optional<Error> err_;
};

/// Run `fn` and turn a KilnException (or std::exception) into an Error.
template <typename Fn>
auto catchErrors(Fn&& fn) -> Result<decltype(fn())> {
  try {
    return fn();
  } catch (const KilnException& e) {
    return Error{e.what(), e.kind()};
  } catch (const std::bad_alloc&) {
    return Error{"out of memory"};
  } catch (const std::exception& e) {
    return Error{std::string("internal error: ") + e.what()};
  }
}

}  // namespace kiln
