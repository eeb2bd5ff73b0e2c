// What a call throws, for tests that expect a braid::Error.
#pragma once

#include <gtest/gtest.h>

#include <braid/error.hpp>
#include <exception>
#include <string>

namespace braid::test {

/// The message of what fn() throws; "" when it returns.
template <typename Fn>
std::string errorOf(Fn&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

/// The code of the braid::Error fn() throws (its message in `message`); a test failure when it
/// throws nothing.
template <typename Fn>
ErrorCode codeOf(Fn&& fn, std::string& message) {
  try {
    fn();
  } catch (const Error& e) {
    message = e.what();
    return e.code();
  }
  ADD_FAILURE() << "expected a braid::Error";
  return ErrorCode::Internal;
}

/// The braid::Error fn() throws; a test failure (and an Internal error) when it throws nothing.
template <typename Fn>
Error thrownBy(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "expected a braid::Error";
  return Error(ErrorCode::Internal, "nothing thrown");
}

}  // namespace braid::test
