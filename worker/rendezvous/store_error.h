// Errors raised by the rendezvous store client and server. Every message names the store's
// address and the key or operation involved, so it can be shown to a user as one line.
#pragma once

#include <stdexcept>
#include <string>

namespace tessera::rendezvous {

// Base of all store errors.
class StoreError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A deadline passed: connecting, or waiting for a key.
class StoreTimeoutError : public StoreError {
 public:
  using StoreError::StoreError;
};

// The server refused our token.
class StoreAuthError : public StoreError {
 public:
  using StoreError::StoreError;
};

// The connection to the server broke (the server, hosted by rank 0, is gone).
class StoreConnectionError : public StoreError {
 public:
  using StoreError::StoreError;
};

}  // namespace tessera::rendezvous
