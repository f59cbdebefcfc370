#include "tiers/io_uring_backend.h"

#include <liburing.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <boost/asio.hpp>
#include <condition_variable>
#include <thread>

#include "common/logging.h"
#include "common/tsan.h"

namespace tierpool {

namespace asio = boost::asio;

// One batch waiting for its completions.
struct Batch {
  std::mutex mu;
  std::condition_variable cv;
  std::size_t left = 0;
};

struct Completion {
  IoOp* op;
  Batch* batch;
};

struct IoUringBackend::Impl {
  io_uring ring{};
  bool ring_ok = false;
  UniqueFd event_fd;
  std::mutex submit_mu;  // the submission queue has one producer at a time
  asio::io_context io;
  std::unique_ptr<asio::posix::stream_descriptor> event;
  std::thread loop;
  std::uint64_t event_buf = 0;

  void Arm() {
    event->async_read_some(asio::buffer(&event_buf, sizeof(event_buf)),
                           [this](boost::system::error_code ec, std::size_t) {
                             if (ec) return;  // cancelled: shutting down
                             Reap();
                             Arm();
                           });
  }

  // Runs on the loop thread: drains the completion queue.
  void Reap() {
    io_uring_cqe* cqe = nullptr;
    while (io_uring_peek_cqe(&ring, &cqe) == 0 && cqe != nullptr) {
      auto* c = static_cast<Completion*>(io_uring_cqe_get_data(cqe));
      int res = cqe->res;
      io_uring_cqe_seen(&ring, cqe);
      if (c == nullptr) continue;
      TIERPOOL_TSAN_ACQUIRE(c);  // pairs with the release before the submission
      if (res < 0) {
        c->op->status = ErrnoStatus(
            std::string("io_uring ") + (c->op->kind == IoOp::Kind::kRead ? "read" : "write"), -res);
      } else {
        c->op->done = static_cast<std::uint64_t>(res);
      }
      std::lock_guard lock(c->batch->mu);
      if (--c->batch->left == 0) c->batch->cv.notify_all();
    }
  }
};

IoUringBackend::IoUringBackend(IoBackendConfig config, std::vector<int> fds)
    : IoBackend(config), impl_(std::make_unique<Impl>()), fds_(std::move(fds)) {}

Result<std::unique_ptr<IoUringBackend>> IoUringBackend::Create(IoBackendConfig config,
                                                               std::vector<int> fds) {
  TIERPOOL_RETURN_IF_ERROR(config.validate());
  std::unique_ptr<IoUringBackend> b(new IoUringBackend(config, std::move(fds)));
  Impl& impl = *b->impl_;
  int rc = io_uring_queue_init(config.queue_depth, &impl.ring, 0);
  if (rc < 0) return ErrnoStatus("io_uring_queue_init", -rc);
  impl.ring_ok = true;
  impl.event_fd.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!impl.event_fd.valid()) return ErrnoStatus("eventfd", errno);
  rc = io_uring_register_eventfd(&impl.ring, impl.event_fd.get());
  if (rc < 0) return ErrnoStatus("io_uring_register_eventfd", -rc);
  impl.event = std::make_unique<asio::posix::stream_descriptor>(impl.io, impl.event_fd.get());
  impl.Arm();
  impl.loop = std::thread([&impl] { impl.io.run(); });
  return b;
}

IoUringBackend::~IoUringBackend() {
  impl_->io.stop();
  if (impl_->loop.joinable()) impl_->loop.join();
  if (impl_->event) impl_->event->release();  // event_fd closes it
  if (impl_->ring_ok) io_uring_queue_exit(&impl_->ring);
}

Status IoUringBackend::RegisterBuffersImpl(const std::vector<iovec>& regions) {
  if (regions.empty()) return Status::Ok();
  std::lock_guard lock(impl_->submit_mu);
  int rc = io_uring_register_buffers(&impl_->ring, regions.data(),
                                     static_cast<unsigned>(regions.size()));
  if (rc < 0) return ErrnoStatus("io_uring_register_buffers", -rc);
  return Status::Ok();
}

void IoUringBackend::SubmitImpl(std::span<IoOp> ops) {
  Batch batch;
  std::vector<Completion> completions(ops.size());
  {
    std::lock_guard lock(impl_->submit_mu);
    for (std::size_t i = 0; i < ops.size(); ++i) {
      IoOp& op = ops[i];
      if (op.file >= fds_.size()) {
        op.status = Status::InvalidArgument("no file " + std::to_string(op.file));
        continue;
      }
      io_uring_sqe* sqe = io_uring_get_sqe(&impl_->ring);
      if (sqe == nullptr) {
        op.status = Status::ResourceExhausted("io_uring submission queue full");
        continue;
      }
      auto len = static_cast<unsigned>(op.len);
      int fd = fds_[op.file];
      if (op.kind == IoOp::Kind::kRead) {
        if (op.fixed_index >= 0) {
          io_uring_prep_read_fixed(sqe, fd, op.buf, len, op.offset, op.fixed_index);
        } else {
          io_uring_prep_read(sqe, fd, op.buf, len, op.offset);
        }
      } else {
        if (op.fixed_index >= 0) {
          io_uring_prep_write_fixed(sqe, fd, op.buf, len, op.offset, op.fixed_index);
        } else {
          io_uring_prep_write(sqe, fd, op.buf, len, op.offset);
        }
      }
      completions[i] = {&op, &batch};
      io_uring_sqe_set_data(sqe, &completions[i]);
      ++batch.left;
    }
    if (batch.left > 0) {
      // The completion thread reaches the batch through the ring, which TSan cannot see.
      for (auto& c : completions) TIERPOOL_TSAN_RELEASE(&c);
      int rc = io_uring_submit(&impl_->ring);
      if (rc < 0) {
        // Nothing went in: fail the whole batch.
        for (auto& c : completions) {
          if (c.op != nullptr) c.op->status = ErrnoStatus("io_uring_submit", -rc);
        }
        return;
      }
    }
  }
  std::unique_lock lock(batch.mu);
  batch.cv.wait(lock, [&] { return batch.left == 0; });
}

Status IoUringBackend::FlushImpl() {
  for (int fd : fds_) {
    if (::fdatasync(fd) != 0) return ErrnoStatus("fdatasync", errno);
  }
  return Status::Ok();
}

}  // namespace tierpool
