// io_uring through liburing: batched submission, fixed (registered) buffers where the memory was
// registered, completions signalled on an eventfd that an Asio loop waits on — the submitting
// thread sleeps on a condition variable, and nobody spins on the completion queue.
#pragma once

#include <memory>

#include "tiers/io_backend.h"

namespace tierpool {

class IoUringBackend final : public IoBackend {
 public:
  // fds: files opened by the caller (O_DIRECT for real devices); the backend does not own them.
  static Result<std::unique_ptr<IoUringBackend>> Create(IoBackendConfig config,
                                                        std::vector<int> fds);
  ~IoUringBackend() override;
  std::string name() const override { return "io_uring"; }

 protected:
  void SubmitImpl(std::span<IoOp> ops) override;
  Status FlushImpl() override;
  Status RegisterBuffersImpl(const std::vector<iovec>& regions) override;

 private:
  IoUringBackend(IoBackendConfig config, std::vector<int> fds);
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::vector<int> fds_;
};

}  // namespace tierpool
