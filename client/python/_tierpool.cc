// tierpool._tierpool: the Python extension over the C++ client (tierpool/client.h). The Python
// package (tierpool/__init__.py, client.py) wraps it; nothing here is public API on its own.
//
// The GIL: every call that talks to the server or copies bytes releases it. A caller's buffer is
// held (PyObject_GetBuffer) for the whole call, so another thread cannot resize or free it.
// Errors: a Status becomes the tierpool exception of its code (tierpool._errors.from_status).
#include <Python.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "client/python/host_memory.h"
#include "client/stats_json.h"
#include "common/checksum.h"
#include "tierpool/client.h"

namespace py = pybind11;
using namespace tierpool;

namespace {

[[noreturn]] void Raise(const Status& s) {
  static py::object* from_status = nullptr;
  if (from_status == nullptr) {
    from_status =
        new py::object(py::module_::import("tierpool._errors").attr("from_status"));  // leaked
  }
  py::object exc = (*from_status)(static_cast<int>(s.code()), s.message());
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
  throw py::error_already_set();
}

void Check(const Status& s) {
  if (!s.ok()) Raise(s);
}

template <typename T>
T Value(Result<T> r) {
  if (!r.ok()) Raise(r.status());
  return std::move(r).value();
}

// Runs f with the GIL released (f touches no Python object) and returns what it returns.
template <typename F>
auto WithoutGil(F&& f) {
  py::gil_scoped_release nogil;
  return f();
}

// A caller's buffer, held for the length of one call.
class HeldBuffer {
 public:
  HeldBuffer(const py::handle& obj, bool writable) {
    int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj.ptr(), &view_, flags) != 0) {
      SayWhatToDo(writable);
      throw py::error_already_set();
    }
  }
  ~HeldBuffer() { PyBuffer_Release(&view_); }
  HeldBuffer(const HeldBuffer&) = delete;
  HeldBuffer& operator=(const HeldBuffer&) = delete;
  void* data() const { return view_.buf; }
  std::size_t size() const { return static_cast<std::size_t>(view_.len); }

 private:
  // numpy refuses a transposed or sliced array with only "ndarray is not C-contiguous": the
  // error (its type kept) says what to pass instead.
  static void SayWhatToDo(bool writable) {
    PyObject *type = nullptr, *value = nullptr, *trace = nullptr;
    PyErr_Fetch(&type, &value, &trace);
    PyErr_NormalizeException(&type, &value, &trace);
    std::string msg = value != nullptr ? py::str(value).cast<std::string>() : "";
    if (msg.find("contiguous") != std::string::npos) {
      msg += writable ? ": an object's bytes are copied in their memory order into one block; "
                        "read into a C-contiguous array (numpy.empty(a.shape, a.dtype)) and "
                        "copy it into this one (a[...] = tmp)"
                      : ": pass a C-contiguous copy (numpy.ascontiguousarray(a))";
      Py_XDECREF(value);
      value = PyUnicode_FromString(msg.c_str());
    }
    PyErr_Restore(type, value, trace);
  }

  Py_buffer view_{};
};

PutOptions MakePutOptions(int kind, int durability, int tier, const std::string& dtype,
                          const std::vector<std::int64_t>& shape) {
  PutOptions o;
  o.kind = static_cast<ObjectKind>(kind);
  o.durability = static_cast<Durability>(durability);
  if (tier >= 0) o.tier = static_cast<TierKind>(tier);
  o.dtype = dtype;
  o.shape = shape;
  return o;
}

GetOptions MakeGetOptions(int tier) {
  GetOptions o;
  if (tier >= 0) o.tier = static_cast<TierKind>(tier);
  return o;
}

py::dict MetaDict(const ObjectMeta& m) {
  py::dict d;
  d["key"] = m.key;
  d["size"] = m.size;
  d["dtype"] = m.dtype;
  d["shape"] = m.shape;
  d["kind"] = static_cast<int>(m.kind);
  d["durability"] = static_cast<int>(m.durability);
  d["tier"] = static_cast<int>(m.tier);
  d["checksum"] = m.checksum;
  d["created_unix_ms"] = m.created_unix_ms;
  d["pins"] = m.pins;
  return d;
}

// A pinned object: a host view exported read-only through the buffer protocol, a device view
// (the copy in a GPU's memory) through __cuda_array_interface__. It goes, and the pin with it,
// when the last memoryview or tensor made from it does, or at release().
struct View {
  ObjectView view;
  bool released = false;
};

// Reserved room, exported writable until commit or abort: shared memory through the buffer
// protocol, or device memory through __cuda_array_interface__ (a device reservation).
struct Reservation {
  WriteReservation reservation;
  bool open = true;
};

// CUDA Array Interface (version 3) of n bytes at a device address: a 1-D uint8 array. No
// stream: the bytes are ready when the view or reservation is handed out. Always marked
// writable: PyTorch refuses read-only arrays, so a device view is read-only by contract only
// (a write would show as a checksum mismatch when the server next moves or checks the copy).
py::dict CudaArrayInterface(const void* address, std::size_t n) {
  py::dict d;
  d["shape"] = py::make_tuple(n);
  d["typestr"] = "|u1";
  d["data"] = py::make_tuple(reinterpret_cast<std::uintptr_t>(address), false);
  d["version"] = 3;
  d["strides"] = py::none();
  return d;
}

struct Plan {
  PlanHandle handle;
};

class PyClient {
 public:
  PyClient(const std::string& socket, const std::string& ns, const std::string& client_name,
           int max_connections, bool verify_checksums, int busy_poll_us, int async_threads) {
    ClientOptions o;
    o.socket_path = socket;
    o.ns = ns;
    o.client_name = client_name;
    o.max_connections = max_connections;
    o.verify_checksums = verify_checksums;
    if (busy_poll_us >= 0) o.busy_poll_us = static_cast<unsigned>(busy_poll_us);
    o.async_threads = async_threads;
    client_ = Value(WithoutGil([&] { return Client::Connect(std::move(o)); }));
  }

  Client& client() {
    if (!client_) Raise(Status::FailedPrecondition("the client is closed"));
    return *client_;
  }
  void Close() {
    py::gil_scoped_release nogil;
    client_.reset();
  }
  bool closed() const { return !client_; }
  std::string ns() { return client().ns(); }

  void Put(const std::string& key, const py::handle& data, int kind, int durability, int tier,
           const std::string& dtype, const std::vector<std::int64_t>& shape) {
    Client& c = client();
    HeldBuffer b(data, false);
    PutOptions o = MakePutOptions(kind, durability, tier, dtype, shape);
    Check(WithoutGil([&] { return c.Put(key, b.data(), b.size(), o); }));
  }

  // For memory the caller keeps alive by other means (a torch tensor's data_ptr()).
  void PutAddress(const std::string& key, std::uintptr_t address, std::size_t size, int kind,
                  int durability, int tier, const std::string& dtype,
                  const std::vector<std::int64_t>& shape) {
    Client& c = client();
    PutOptions o = MakePutOptions(kind, durability, tier, dtype, shape);
    Check(WithoutGil([&] { return c.Put(key, reinterpret_cast<const void*>(address), size, o); }));
  }

  py::bytes Get(const std::string& key) {
    Client& c = client();
    ObjectView v = Value(WithoutGil([&] { return c.GetView(key); }));
    py::bytes bytes;
    Check(CopyToBytes(v, &bytes));
    return bytes;
  }

  std::size_t GetInto(const std::string& key, const py::handle& buffer, int tier) {
    Client& c = client();
    HeldBuffer b(buffer, true);
    GetOptions o = MakeGetOptions(tier);
    return Value(WithoutGil([&] { return c.Get(key, b.data(), b.size(), o); }));
  }

  std::size_t GetIntoAddress(const std::string& key, std::uintptr_t address, std::size_t capacity,
                             int tier) {
    Client& c = client();
    GetOptions o = MakeGetOptions(tier);
    return Value(
        WithoutGil([&] { return c.Get(key, reinterpret_cast<void*>(address), capacity, o); }));
  }

  View* GetView(const std::string& key, int tier, bool device) {
    Client& c = client();
    GetViewOptions o = MakeGetOptions(tier);
    o.device = device;
    return new View{Value(WithoutGil([&] { return c.GetView(key, o); }))};
  }

  Reservation* Reserve(const std::string& key, std::size_t size, int kind, int durability, int tier,
                       const std::string& dtype, const std::vector<std::int64_t>& shape,
                       bool device) {
    Client& c = client();
    PutOptions o = MakePutOptions(kind, durability, tier, dtype, shape);
    o.device = device;
    return new Reservation{Value(WithoutGil([&] { return c.Reserve(key, size, o); }))};
  }

  int hbm_device() { return client().hbm_device(); }

  void Delete(const std::string& key) {
    Client& c = client();
    Check(WithoutGil([&] { return c.Delete(key); }));
  }

  void Promote(const std::string& key, int tier) {
    Client& c = client();
    Check(WithoutGil([&] { return c.Promote(key, static_cast<TierKind>(tier)); }));
  }

  py::dict StatObject(const std::string& key) {
    Client& c = client();
    return MetaDict(Value(WithoutGil([&] { return c.Stat(key); })));
  }

  py::list List(const std::string& prefix, std::uint32_t limit) {
    Client& c = client();
    auto list = Value(WithoutGil([&] { return c.List(prefix, limit); }));
    py::list out;
    for (const auto& m : list) out.append(MetaDict(m));
    return out;
  }

  std::string ServerStatJson(bool reset_peaks) {
    Client& c = client();
    StatOptions o;
    o.reset_peaks = reset_peaks;
    return StatsJson(Value(WithoutGil([&] { return c.ServerStat(o); }))).dump();
  }

  // items: (key, buffer) pairs; returns (code, message) per item.
  py::list PutBatch(const py::list& items, int kind, int durability, int tier) {
    Client& c = client();
    std::vector<std::unique_ptr<HeldBuffer>> held;
    std::vector<PutItem> batch;
    held.reserve(items.size());
    batch.reserve(items.size());
    PutOptions o = MakePutOptions(kind, durability, tier, "", {});
    for (const auto& item : items) {
      auto pair = item.cast<py::tuple>();
      if (pair.size() != 2) throw py::value_error("put_batch items are (key, data) pairs");
      held.push_back(std::make_unique<HeldBuffer>(pair[1], false));
      batch.push_back({pair[0].cast<std::string>(), held.back()->data(), held.back()->size(), o});
    }
    return StatusList(WithoutGil([&] { return c.PutBatch(batch); }));
  }

  // items: (key, writable buffer) pairs; returns (code, message, size) per item.
  py::list GetBatchInto(const py::list& items) {
    Client& c = client();
    std::vector<std::unique_ptr<HeldBuffer>> held;
    std::vector<GetItem> batch;
    held.reserve(items.size());
    batch.reserve(items.size());
    for (const auto& item : items) {
      auto pair = item.cast<py::tuple>();
      if (pair.size() != 2) throw py::value_error("get_batch_into items are (key, buffer) pairs");
      held.push_back(std::make_unique<HeldBuffer>(pair[1], true));
      batch.push_back({pair[0].cast<std::string>(), held.back()->data(), held.back()->size()});
    }
    auto results = WithoutGil([&] { return c.GetBatch(batch); });
    py::list out;
    for (const auto& r : results) {
      out.append(py::make_tuple(static_cast<int>(r.status().code()), r.status().message(),
                                r.ok() ? *r : 0));
    }
    return out;
  }

  // One round trip of views, each copied into a new bytes object; (code, message, bytes|None).
  py::list GetBatch(const std::vector<std::string>& keys) {
    Client& c = client();
    auto views = WithoutGil([&] { return c.GetViews(keys); });
    py::list out;
    for (auto& v : views) {
      if (!v.ok()) {
        out.append(
            py::make_tuple(static_cast<int>(v.status().code()), v.status().message(), py::none()));
        continue;
      }
      py::bytes bytes;
      Status s = CopyToBytes(*v, &bytes);
      out.append(py::make_tuple(static_cast<int>(s.code()), s.message(),
                                s.ok() ? py::object(bytes) : py::object(py::none())));
    }
    return out;
  }

  // Views of several objects in one round trip: (code, message, View or None) per key.
  py::list GetViews(const std::vector<std::string>& keys, int tier, bool device) {
    Client& c = client();
    GetViewOptions o = MakeGetOptions(tier);
    o.device = device;
    auto views = WithoutGil([&] { return c.GetViews(keys, o); });
    py::list out;
    for (auto& v : views) {
      if (!v.ok()) {
        out.append(
            py::make_tuple(static_cast<int>(v.status().code()), v.status().message(), py::none()));
        continue;
      }
      out.append(py::make_tuple(
          0, std::string(),
          py::cast(new View{std::move(*v)}, py::return_value_policy::take_ownership)));
    }
    return out;
  }

  // Whether each key is stored, in one round trip (the views taken are released at once).
  std::vector<bool> ContainsBatch(const std::vector<std::string>& keys) {
    Client& c = client();
    std::vector<bool> out;
    Status failure;
    {
      py::gil_scoped_release nogil;
      auto views = c.GetViews(keys);
      for (auto& v : views) {
        out.push_back(v.ok());
        if (!v.ok() && v.status().code() != StatusCode::kNotFound && failure.ok()) {
          failure = v.status();
        }
      }
    }
    Check(failure);
    return out;
  }

  py::list DeleteBatch(const std::vector<std::string>& keys) {
    Client& c = client();
    return StatusList(WithoutGil([&] { return c.DeleteBatch(keys); }));
  }

  Plan* RegisterPlan(const std::string& name, const py::bytes& schedule, const py::bytes& plan,
                     const std::vector<std::string>& keys, std::uint64_t hbm_budget_bytes,
                     const std::string& owned_prefix) {
    Client& c = client();
    PlanRegistration r{name, schedule, plan, keys, hbm_budget_bytes, owned_prefix};
    return new Plan{Value(WithoutGil([&] { return c.RegisterPlan(r); }))};
  }

  void set_verify(bool v) { verify_ = v; }

 private:
  // A view's bytes copied into a new bytes object (checked when verify_ is set), and the view
  // released: the one copy a get into Python makes.
  Status CopyToBytes(ObjectView& v, py::bytes* out) {
    PyObject* b = PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(v.size()));
    if (b == nullptr) throw py::error_already_set();
    *out = py::reinterpret_steal<py::bytes>(b);
    return WithoutGil([&] {
      // One pass: the copy checks the bytes as it goes when verify_ is set.
      Status s = Status::Ok();
      if (!verify_) {
        CopyBytes(PyBytes_AS_STRING(b), v.data(), v.size());
      } else if (CopyAndChecksum(PyBytes_AS_STRING(b), v.data(), v.size()) != v.meta().checksum) {
        s = Status::DataLoss("checksum mismatch for '" + v.meta().key + "'");
      }
      v.Release();
      return s;
    });
  }

  static py::list StatusList(const std::vector<Status>& statuses) {
    py::list out;
    for (const auto& s : statuses) {
      out.append(py::make_tuple(static_cast<int>(s.code()), s.message()));
    }
    return out;
  }

  std::unique_ptr<Client> client_;
  bool verify_ = false;
};

}  // namespace

PYBIND11_MODULE(_tierpool, m) {
  m.doc() = "tierpool's C++ client for Python; use the tierpool package, not this module.";

  py::class_<View>(m, "View", py::buffer_protocol())
      .def_buffer([](View& v) {
        if (v.released) throw py::buffer_error("the view is released");
        if (v.view.device_data() != nullptr) {
          throw py::buffer_error("a device view has no host bytes: use __cuda_array_interface__");
        }
        return py::buffer_info(const_cast<std::byte*>(v.view.data()), 1,
                               py::format_descriptor<std::uint8_t>::format(), 1,
                               {static_cast<py::ssize_t>(v.view.size())}, {1}, /*readonly=*/true);
      })
      .def_property_readonly("key", [](const View& v) { return v.view.meta().key; })
      .def_property_readonly("size", [](const View& v) { return v.view.size(); })
      .def_property_readonly("tier",
                             [](const View& v) { return static_cast<int>(v.view.meta().tier); })
      .def_property_readonly("checksum", [](const View& v) { return v.view.meta().checksum; })
      .def_property_readonly("dtype", [](const View& v) { return v.view.meta().dtype; })
      .def_property_readonly("shape", [](const View& v) { return v.view.meta().shape; })
      .def_property_readonly("device", [](const View& v) { return v.view.device(); })
      .def_property_readonly("__cuda_array_interface__",
                             [](const View& v) {
                               if (v.released || v.view.device_data() == nullptr) {
                                 throw py::attribute_error("not a device view");
                               }
                               return CudaArrayInterface(v.view.device_data(), v.view.size());
                             })
      .def("verify",
           [](const View& v) {
             if (v.released) Raise(Status::FailedPrecondition("the view is released"));
             Check(WithoutGil([&] { return v.view.Verify(); }));
           })
      .def("release", [](View& v) {
        // Device views only: a memoryview made from a host view would keep pointing at bytes
        // no longer pinned (a host view goes with its last memoryview). The caller makes sure
        // that no kernel still reads a device view it releases.
        if (v.released) return;
        if (v.view.device_data() == nullptr) {
          Raise(Status::FailedPrecondition("only a device view is released by hand"));
        }
        v.released = true;
        WithoutGil([&] {
          v.view.Release();
          return 0;
        });
      });

  py::class_<Reservation>(m, "Reservation", py::buffer_protocol())
      .def_buffer([](Reservation& r) {
        if (!r.open) throw py::value_error("the reservation is already committed or aborted");
        if (r.reservation.device_data() != nullptr) {
          throw py::buffer_error(
              "a device reservation has no host bytes: use __cuda_array_interface__");
        }
        return py::buffer_info(r.reservation.data(), 1,
                               py::format_descriptor<std::uint8_t>::format(), 1,
                               {static_cast<py::ssize_t>(r.reservation.size())}, {1},
                               /*readonly=*/false);
      })
      .def_property_readonly("size", [](const Reservation& r) { return r.reservation.size(); })
      .def_property_readonly("open", [](const Reservation& r) { return r.open; })
      .def_property_readonly("device", [](const Reservation& r) { return r.reservation.device(); })
      .def_property_readonly(
          "tier", [](const Reservation& r) { return static_cast<int>(r.reservation.tier()); })
      .def_property_readonly("__cuda_array_interface__",
                             [](Reservation& r) {
                               if (!r.open || r.reservation.device_data() == nullptr) {
                                 throw py::attribute_error("not an open device reservation");
                               }
                               return CudaArrayInterface(r.reservation.device_data(),
                                                         r.reservation.size());
                             })
      .def("commit",
           [](Reservation& r) {
             if (!r.open)
               Raise(Status::FailedPrecondition("reservation already committed or aborted"));
             r.open = false;
             Check(WithoutGil([&] { return r.reservation.Commit(); }));
           })
      .def("abort", [](Reservation& r) {
        if (!r.open) return;
        r.open = false;
        Check(WithoutGil([&] { return r.reservation.Abort(); }));
      });

  py::class_<Plan>(m, "Plan")
      .def_property_readonly("job_id", [](const Plan& p) { return p.handle.job_id(); })
      .def(
          "report_progress",
          [](Plan& p, std::uint64_t iteration, std::uint32_t step, std::uint64_t outside_bytes) {
            Check(WithoutGil(
                [&] { return p.handle.ReportProgress(iteration, step, outside_bytes); }));
          },
          py::arg("iteration"), py::arg("step"), py::arg("outside_bytes") = 0)
      .def("unregister", [](Plan& p) { Check(WithoutGil([&] { return p.handle.Unregister(); })); });

  m.def("host_bytes_in_use", &python::HostBytesInUse,
        "Host memory malloc has handed out and not had back (mallinfo2), in bytes.");
  py::class_<python::HostMemorySampler>(m, "HostMemorySampler")
      .def(py::init([](double interval_us) {
             return new python::HostMemorySampler(
                 std::chrono::microseconds(static_cast<std::int64_t>(interval_us)));
           }),
           py::arg("interval_us") = 1000.0)
      .def("sample", &python::HostMemorySampler::Sample)
      .def("take_peak", &python::HostMemorySampler::TakePeak,
           py::call_guard<py::gil_scoped_release>())
      .def_property("offset", &python::HostMemorySampler::offset,
                    &python::HostMemorySampler::set_offset);

  py::class_<PyClient>(m, "Client")
      .def(py::init<const std::string&, const std::string&, const std::string&, int, bool, int,
                    int>())
      .def("close", &PyClient::Close)
      .def_property_readonly("closed", &PyClient::closed)
      .def_property_readonly("namespace", &PyClient::ns)
      .def_property_readonly("hbm_device", &PyClient::hbm_device)
      .def("set_verify", &PyClient::set_verify)
      .def("put", &PyClient::Put)
      .def("put_address", &PyClient::PutAddress)
      .def("get", &PyClient::Get)
      .def("get_into", &PyClient::GetInto, py::arg("key"), py::arg("buffer"), py::arg("tier") = -1)
      .def("get_into_address", &PyClient::GetIntoAddress, py::arg("key"), py::arg("address"),
           py::arg("capacity"), py::arg("tier") = -1)
      .def("view", &PyClient::GetView, py::arg("key"), py::arg("tier"), py::arg("device") = false,
           py::return_value_policy::take_ownership)
      .def("reserve", &PyClient::Reserve, py::arg("key"), py::arg("size"), py::arg("kind"),
           py::arg("durability"), py::arg("tier"), py::arg("dtype"), py::arg("shape"),
           py::arg("device") = false, py::return_value_policy::take_ownership)
      .def("delete", &PyClient::Delete)
      .def("promote", &PyClient::Promote)
      .def("stat_object", &PyClient::StatObject)
      .def("list", &PyClient::List)
      .def("server_stat_json", &PyClient::ServerStatJson)
      .def("put_batch", &PyClient::PutBatch)
      .def("get_batch", &PyClient::GetBatch)
      .def("get_batch_into", &PyClient::GetBatchInto)
      .def("delete_batch", &PyClient::DeleteBatch)
      .def("contains_batch", &PyClient::ContainsBatch)
      .def("view_batch", &PyClient::GetViews, py::arg("keys"), py::arg("tier"),
           py::arg("device") = false)
      .def("register_plan", &PyClient::RegisterPlan, py::arg("name"), py::arg("schedule"),
           py::arg("plan"), py::arg("keys"), py::arg("hbm_budget_bytes"),
           py::arg("owned_prefix") = std::string(), py::return_value_policy::take_ownership);
}
