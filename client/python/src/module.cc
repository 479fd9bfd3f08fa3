// adjsnap._adjsnap: the Python binding of libadjsnap (adjsnap/client.h).
//
// Arrays cross through the buffer protocol: a C-contiguous array is pushed from, and fetched
// into, its own memory (no copy in Python; the data path makes the one copy it always makes).
// Every blocking call releases the GIL. An asynchronous push or fetch keeps its array alive
// until the daemon no longer needs it, even when the handle is dropped early.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <cmath>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "adjsnap/adjoint.h"
#include "adjsnap/client.h"

namespace py = pybind11;

namespace {

// adjsnap.Error and one subclass per code, created at import (see PYBIND11_MODULE below).
std::vector<std::pair<adjsnap::Code, py::object>>& ErrorClasses() {
  static auto* classes = new std::vector<std::pair<adjsnap::Code, py::object>>();
  return *classes;
}
py::object& BaseError() {
  static auto* base = new py::object();
  return *base;
}

[[noreturn]] void Raise(const adjsnap::Status& status) {
  py::object cls = BaseError();
  for (const auto& [code, c] : ErrorClasses()) {
    if (code == status.code()) cls = c;
  }
  py::object exc = cls(status.message());
  exc.attr("code") = adjsnap::CodeName(status.code());
  PyErr_SetObject(cls.ptr(), exc.ptr());
  throw py::error_already_set();
}

// "1 snapshot", "3 snapshots": a count and its noun, as the reprs print them.
std::string Counted(uint64_t n, const char* noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

void Check(const adjsnap::Status& status) {
  if (!status.ok()) Raise(status);
}
template <typename T>
T Value(adjsnap::Result<T> result) {
  if (!result.ok()) Raise(result.status());
  return std::move(result).value();
}

// Runs a client call with the GIL released and returns its value or raises.
template <typename F>
auto Call(F&& f) {
  auto r = [&] {
    py::gil_scoped_release nogil;
    return f();
  }();
  if constexpr (std::is_same_v<decltype(r), adjsnap::Status>) {
    Check(r);
  } else {
    return Value(std::move(r));
  }
}

// A contiguous view of a Python object's memory: what a push reads or a fetch fills.
struct Bytes {
  py::buffer_info info;
  void* data = nullptr;
  size_t size = 0;
};

// A CUDA array exported through __cuda_array_interface__ (CuPy, Numba, PyTorch): its device
// pointer, its size, and the stream its producer works on (the copy is ordered after it).
struct DeviceBytes {
  void* data = nullptr;
  size_t size = 0;
  void* stream = nullptr;
};

std::optional<DeviceBytes> DeviceView(const py::object& array, bool writable, const char* what) {
  if (!py::hasattr(array, "__cuda_array_interface__")) return std::nullopt;
  py::dict cai = array.attr("__cuda_array_interface__");
  std::string where = std::string(what) + ": __cuda_array_interface__ ";
  py::tuple data = cai["data"];
  if (writable && data[1].cast<bool>()) {
    throw py::value_error(std::string(what) + ": the device array is read-only");
  }
  std::string typestr = cai["typestr"].cast<std::string>();
  size_t itemsize = typestr.size() > 2 ? std::stoul(typestr.substr(2)) : 0;
  if (itemsize == 0) throw py::value_error(where + "has typestr '" + typestr + "'");
  size_t count = 1;
  std::vector<size_t> shape;
  for (auto d : py::tuple(cai["shape"])) shape.push_back(d.cast<size_t>());
  for (size_t d : shape) count *= d;
  if (cai.contains("strides") && !cai["strides"].is_none()) {
    py::tuple strides = cai["strides"];
    size_t expect = itemsize;
    for (size_t i = shape.size(); i-- > 0;) {
      if (shape[i] > 1 && strides[i].cast<size_t>() != expect) {
        throw py::value_error(std::string(what) + ": the device array must be C-contiguous "
                              "(cupy.ascontiguousarray makes a contiguous copy)");
      }
      expect *= shape[i];
    }
  }
  DeviceBytes b;
  b.data = reinterpret_cast<void*>(data[0].cast<uintptr_t>());
  b.size = count * itemsize;
  // Version 3: 1 is the legacy default stream, 2 the per-thread one, as CUDA numbers them.
  if (cai.contains("stream") && !cai["stream"].is_none()) {
    b.stream = reinterpret_cast<void*>(cai["stream"].cast<uintptr_t>());
  }
  return b;
}

Bytes View(const py::object& array, bool writable, const char* what) {
  if (!PyObject_CheckBuffer(array.ptr())) {
    std::string type = py::str(py::type::of(array).attr("__name__"));
    if (py::hasattr(array, "__dlpack_device__")) {
      throw py::type_error(std::string(what) + ": a " + type +
                           " offers only DLPack; adjsnapd takes device arrays through "
                           "__cuda_array_interface__ (CuPy, Numba and PyTorch export it)");
    }
    throw py::type_error(std::string(what) + ": expected an array or other buffer, got a " +
                         type);
  }
  int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
  auto raw = std::make_unique<Py_buffer>();
  if (PyObject_GetBuffer(array.ptr(), raw.get(), flags) != 0) {
    PyErr_Clear();
    bool readonly = writable && PyObject_GetBuffer(array.ptr(), raw.get(), PyBUF_C_CONTIGUOUS) == 0;
    if (readonly) PyBuffer_Release(raw.get());
    PyErr_Clear();
    throw py::value_error(std::string(what) + ": the array must be " +
                          (readonly ? "writable" : "C-contiguous") +
                          (readonly ? "" : " (numpy.ascontiguousarray makes a contiguous copy)"));
  }
  // buffer_info owns the export from here: it releases and deletes it.
  Bytes b{py::buffer_info(raw.release(), true), nullptr, 0};
  b.data = b.info.ptr;
  b.size = static_cast<size_t>(b.info.size) * static_cast<size_t>(b.info.itemsize);
  return b;
}

// A wait limit given in seconds from Python: None is the client's default (nullopt); a
// negative or NaN one is refused.
std::optional<std::chrono::milliseconds> Limit(std::optional<double> seconds) {
  if (!seconds) return std::nullopt;
  if (!(*seconds >= 0)) {
    throw py::value_error("timeout must be a number of seconds >= 0, got " +
                          std::to_string(*seconds));
  }
  if (*seconds > 1e9) return adjsnap::kWaitForever;
  return std::chrono::milliseconds(static_cast<int64_t>(std::ceil(*seconds * 1000)));
}

// A push in flight: holds the array until the daemon released it.
struct Push {
  adjsnap::PushHandle handle;
  py::object array;
  Bytes view;  // the buffer export stays open while the daemon may read the memory
  uint64_t step = 0;

  void WaitReleased(std::optional<double> timeout) {
    std::optional<std::chrono::milliseconds> limit = Limit(timeout);
    Call([&] { return limit ? handle.WaitReleased(*limit) : handle.WaitReleased(); });
  }
  void WaitStored(std::optional<double> timeout) {
    std::optional<std::chrono::milliseconds> limit = Limit(timeout);
    Call([&] { return limit ? handle.WaitStored(*limit) : handle.WaitStored(); });
  }
  ~Push() {
    if (array && !handle.released()) {
      py::gil_scoped_release nogil;
      // The array may be freed after this: no limit. Errors are the caller's.
      (void)handle.WaitReleased(adjsnap::kWaitForever);
    }
  }
};

// A fetch in flight: holds the destination array until it is filled.
struct Fetch {
  adjsnap::FetchHandle handle;
  py::object array;
  Bytes view;
  uint64_t step = 0;

  py::object Wait(std::optional<double> timeout) {
    std::optional<std::chrono::milliseconds> limit = Limit(timeout);
    Call([&] { return limit ? handle.Wait(*limit) : handle.Wait(); });
    return array;
  }
  ~Fetch() {
    if (array && !handle.done()) {
      py::gil_scoped_release nogil;
      (void)handle.Wait(adjsnap::kWaitForever);
    }
  }
};

std::shared_ptr<adjsnap::Client> Connect(const std::string& socket, const std::string& name,
                                       bool map_host_tier, std::optional<double> reconnect,
                                       int copy_threads, std::optional<double> wait_timeout) {
  adjsnap::ClientOptions o{.socket_path = socket, .client_name = name,
                         .map_host_tier = map_host_tier, .copy_threads = copy_threads};
  if (wait_timeout) o.wait_timeout_s = *wait_timeout;
  auto client = std::shared_ptr<adjsnap::Client>(Call([&] { return adjsnap::Client::Connect(o); }));
  if (reconnect) client->set_reconnect_timeout(*reconnect);
  return client;
}

// RunAdjoint's online mode over Python callbacks. The run releases the GIL; each callback takes
// it back. An exception a callback raises stops the run (as a solver error does) and is raised
// again once the run has cleaned up.
py::dict RunAdjointOnline(const py::object& client, const std::string& name, py::object state,
                          py::object advance, py::object reverse, py::object is_last,
                          uint64_t slots, bool local, uint64_t max_steps) {
  std::shared_ptr<adjsnap::Client> c;
  if (!client.is_none()) c = client.cast<std::shared_ptr<adjsnap::Client>>();
  Bytes view = View(state, true, "run_adjoint_online state");
  std::optional<py::error_already_set> raised;
  // Runs one Python call under the GIL; an exception becomes ABORTED and is kept.
  auto guarded = [&raised](const char* what, auto&& body) -> adjsnap::Status {
    py::gil_scoped_acquire gil;
    try {
      body();
      return adjsnap::Status::Ok();
    } catch (py::error_already_set& e) {
      if (!raised) raised.emplace(std::move(e));
      return adjsnap::Status::Aborted(std::string(what) + " raised an exception");
    }
  };
  adjsnap::AdjointSolver solver;
  solver.state = view.data;
  solver.bytes = view.size;
  solver.advance = [&](uint64_t from, uint64_t to) {
    return guarded("advance", [&] { advance(from, to); });
  };
  solver.reverse = [&](uint64_t step) { return guarded("reverse", [&] { reverse(step); }); };
  adjsnap::OnlineCheckpointing online;
  online.storage = local ? adjsnap::Storage::kLocalMemory : adjsnap::Storage::kAdjsnap;
  online.slots = slots;
  online.max_steps = max_steps;
  online.is_last = [&](uint64_t step) -> adjsnap::Result<bool> {
    bool last = false;
    ADJSNAP_RETURN_IF_ERROR(
        guarded("is_last", [&] { last = py::bool_(is_last(step)).cast<bool>(); }));
    return last;
  };
  adjsnap::schedule::Schedule done;
  adjsnap::Status status;
  {
    py::gil_scoped_release nogil;
    status = adjsnap::RunAdjoint(online, c.get(), name, solver, &done);
  }
  if (raised) throw std::move(*raised);
  Check(status);
  py::dict out;
  out["steps"] = done.steps;
  out["forward_steps"] = done.forward_steps;
  uint64_t writes = 0, reads = 0;
  for (const auto& a : done.actions) {
    writes += a.kind == adjsnap::schedule::ActionKind::kWrite;
    reads += a.kind == adjsnap::schedule::ActionKind::kRead;
  }
  out["writes"] = writes;
  out["reads"] = reads;
  return out;
}

}  // namespace

PYBIND11_MODULE(_adjsnap, m) {
  m.doc() = "Python binding of libadjsnap, the client of the adjsnapd snapshot daemon";

  BaseError() = py::reinterpret_borrow<py::object>(
      PyErr_NewExceptionWithDoc("adjsnap.Error", "An error adjsnapd or libadjsnap reported; "
                                "`code` is its gRPC-style code name.", PyExc_RuntimeError, nullptr));
  BaseError().attr("code") = "UNKNOWN";
  m.attr("Error") = BaseError();
  struct Sub {
    adjsnap::Code code;
    const char* name;
    PyObject* also;  // a builtin exception the class also derives from, or null
  };
  for (const Sub& s : {Sub{adjsnap::Code::kInvalidArgument, "InvalidArgument", PyExc_ValueError},
                       Sub{adjsnap::Code::kNotFound, "NotFound", PyExc_LookupError},
                       Sub{adjsnap::Code::kAlreadyExists, "AlreadyExists", nullptr},
                       Sub{adjsnap::Code::kPermissionDenied, "PermissionDenied", PyExc_PermissionError},
                       Sub{adjsnap::Code::kResourceExhausted, "ResourceExhausted", PyExc_MemoryError},
                       Sub{adjsnap::Code::kFailedPrecondition, "FailedPrecondition", nullptr},
                       Sub{adjsnap::Code::kUnavailable, "Unavailable", PyExc_ConnectionError},
                       Sub{adjsnap::Code::kDataLoss, "DataLoss", nullptr},
                       Sub{adjsnap::Code::kDeadlineExceeded, "DeadlineExceeded", PyExc_TimeoutError}}) {
    py::tuple bases = s.also ? py::tuple(py::make_tuple(BaseError(), py::handle(s.also)))
                             : py::tuple(py::make_tuple(BaseError()));
    std::string qualified = std::string("adjsnap.") + s.name;
    py::object cls = py::reinterpret_steal<py::object>(
        PyErr_NewException(qualified.c_str(), bases.ptr(), nullptr));
    cls.attr("code") = adjsnap::CodeName(s.code);  // also on instances raised from Python
    m.attr(s.name) = cls;
    ErrorClasses().emplace_back(s.code, cls);
  }

  py::enum_<adjsnap::Tier>(m, "Tier")
      .value("UNSPECIFIED", adjsnap::Tier::kUnspecified)
      .value("DEVICE", adjsnap::Tier::kDevice)
      .value("HOST", adjsnap::Tier::kHost)
      .value("DISK", adjsnap::Tier::kDisk)
      .value("LOST", adjsnap::Tier::kLost)
      .value("IN_FLIGHT", adjsnap::Tier::kInFlight);
  py::enum_<adjsnap::Dtype>(m, "Dtype")
      .value("UNSPECIFIED", adjsnap::Dtype::kUnspecified)
      .value("FLOAT32", adjsnap::Dtype::kFloat32)
      .value("FLOAT64", adjsnap::Dtype::kFloat64)
      .value("INT32", adjsnap::Dtype::kInt32)
      .value("INT64", adjsnap::Dtype::kInt64)
      .value("UINT8", adjsnap::Dtype::kUint8);
  py::enum_<adjsnap::Codec>(m, "Codec")
      .value("NONE", adjsnap::Codec::kNone)
      .value("ZFP_REVERSIBLE", adjsnap::Codec::kZfpReversible)
      .value("ZFP_RATE", adjsnap::Codec::kZfpRate)
      .value("ZFP_PRECISION", adjsnap::Codec::kZfpPrecision)
      .value("ZFP_ACCURACY", adjsnap::Codec::kZfpAccuracy)
      .value("BITCOMP", adjsnap::Codec::kBitcomp)
      .value("BITCOMP_LOSSY", adjsnap::Codec::kBitcompLossy)
      .value("ANS", adjsnap::Codec::kAns);

  py::class_<adjsnap::RunSpec>(m, "RunSpec")
      .def(py::init<>())
      .def_readwrite("name", &adjsnap::RunSpec::name)
      .def_readwrite("steps", &adjsnap::RunSpec::steps)
      .def_readwrite("bytes_per_step", &adjsnap::RunSpec::bytes_per_step)
      .def_readwrite("dtype", &adjsnap::RunSpec::dtype)
      .def_readwrite("shape", &adjsnap::RunSpec::shape)
      .def_readwrite("layers", &adjsnap::RunSpec::layers)
      .def_readwrite("keep", &adjsnap::RunSpec::keep)
      .def_readwrite("block_when_full", &adjsnap::RunSpec::block_when_full)
      .def_readwrite("codec", &adjsnap::RunSpec::codec)
      .def_readwrite("codec_param", &adjsnap::RunSpec::codec_param)
      .def_readwrite("compress_at_ingest", &adjsnap::RunSpec::compress_at_ingest)
      .def_readwrite("job", &adjsnap::RunSpec::job)
      .def_readwrite("check_finite", &adjsnap::RunSpec::check_finite)
      .def_readwrite("overwrite", &adjsnap::RunSpec::overwrite)
      .def_readwrite("spool_class", &adjsnap::RunSpec::spool_class);
  py::class_<adjsnap::RunInfo>(m, "RunInfo")
      .def_readonly("run_id", &adjsnap::RunInfo::run_id)
      .def_readonly("spec", &adjsnap::RunInfo::spec)
      .def_readonly("closed", &adjsnap::RunInfo::closed)
      .def_readonly("created", &adjsnap::RunInfo::created)
      .def_readonly("snapshots", &adjsnap::RunInfo::snapshots)
      .def_readonly("stored_bytes", &adjsnap::RunInfo::stored_bytes)
      .def_readonly("host_boundary", &adjsnap::RunInfo::host_boundary)
      .def_readonly("device_boundary", &adjsnap::RunInfo::device_boundary)
      .def_readonly("lost_snapshots", &adjsnap::RunInfo::lost_snapshots)
      .def_readonly("compressed_snapshots", &adjsnap::RunInfo::compressed_snapshots)
      .def_readonly("failure", &adjsnap::RunInfo::failure)
      .def_property_readonly("name", [](const adjsnap::RunInfo& r) { return r.spec.name; })
      .def("__repr__", [](const adjsnap::RunInfo& r) {
        std::string text = "<adjsnap.RunInfo " + std::string(py::repr(py::str(r.spec.name))) +
                           " id " + std::to_string(r.run_id) + (r.closed ? " closed" : " open") +
                           ", " + Counted(r.snapshots, "snapshot");
        if (r.spec.steps) text += " of " + Counted(r.spec.steps, "step");
        text += ", " + std::to_string(r.stored_bytes) + " B stored";
        if (r.lost_snapshots) text += ", " + std::to_string(r.lost_snapshots) + " lost";
        if (!r.failure.empty()) text += ", failed: " + r.failure;
        return text + ">";
      });
  py::class_<adjsnap::Location>(m, "Location")
      .def_readonly("step", &adjsnap::Location::step)
      .def_readonly("tier", &adjsnap::Location::tier)
      .def_readonly("raw_bytes", &adjsnap::Location::raw_bytes)
      .def_readonly("stored_bytes", &adjsnap::Location::stored_bytes)
      .def_property_readonly("checksum",
                             [](const adjsnap::Location& l) -> py::object {
                               if (!l.checksum_recorded) return py::none();
                               return py::int_(l.checksum);
                             })
      .def_readonly("on_disk", &adjsnap::Location::on_disk)
      .def_readonly("device_session", &adjsnap::Location::device_session)
      .def_readonly("codec", &adjsnap::Location::codec)
      .def("__repr__", [](const adjsnap::Location& l) {
        return "<adjsnap.Location step " + std::to_string(l.step) + " " + adjsnap::TierName(l.tier) +
               " " + std::to_string(l.stored_bytes) + "/" + std::to_string(l.raw_bytes) + " B>";
      });
  py::class_<adjsnap::TransferCost>(m, "TransferCost")
      .def_readonly("latency_seconds", &adjsnap::TransferCost::latency_seconds)
      .def_readonly("bytes_per_second", &adjsnap::TransferCost::bytes_per_second)
      .def_readonly("samples", &adjsnap::TransferCost::samples)
      .def_readonly("min_bytes", &adjsnap::TransferCost::min_bytes)
      .def_readonly("max_bytes", &adjsnap::TransferCost::max_bytes)
      .def("covers", &adjsnap::TransferCost::Covers, py::arg("nbytes"))
      .def("seconds", &adjsnap::TransferCost::Seconds, py::arg("nbytes"))
      .def("__repr__", [](const adjsnap::TransferCost& c) {
        return "<adjsnap.TransferCost " + std::to_string(c.latency_seconds) + " s + bytes / " +
               std::to_string(c.bytes_per_second) + " B/s over " +
               Counted(c.samples, "transfer") + ">";
      });
  py::class_<adjsnap::TierInfo>(m, "TierInfo")
      .def_readonly("tier", &adjsnap::TierInfo::tier)
      .def_readonly("budget_bytes", &adjsnap::TierInfo::budget_bytes)
      .def_readonly("used_bytes", &adjsnap::TierInfo::used_bytes)
      .def_readonly("snapshots", &adjsnap::TierInfo::snapshots)
      .def_readonly("write_bytes_per_second", &adjsnap::TierInfo::write_bytes_per_second)
      .def_readonly("read_bytes_per_second", &adjsnap::TierInfo::read_bytes_per_second)
      .def_readonly("spool_class", &adjsnap::TierInfo::spool_class)
      .def_readonly("write_fit", &adjsnap::TierInfo::write_fit)
      .def_readonly("read_fit", &adjsnap::TierInfo::read_fit)
      .def("__repr__", [](const adjsnap::TierInfo& t) {
        return std::string("<adjsnap.TierInfo ") + adjsnap::TierName(t.tier) + " " +
               Counted(t.snapshots, "snapshot") + ", " + std::to_string(t.used_bytes) + " of " +
               std::to_string(t.budget_bytes) + " B used>";
      });

  py::class_<Push>(m, "Push")
      .def_readonly("step", &Push::step)
      .def("wait_released", &Push::WaitReleased, py::arg("timeout") = py::none(),
           "Blocks until the pushed array may be overwritten; raises if the push failed. "
           "At most `timeout` seconds (None: the client's wait_timeout): then DeadlineExceeded "
           "says what adjsnapd reports the push waits for, and the push goes on.")
      .def("wait_stored", &Push::WaitStored, py::arg("timeout") = py::none(),
           "Blocks until the daemon stored the snapshot; raises with the daemon's reason. "
           "`timeout` as for wait_released.")
      .def_property_readonly("released", [](const Push& p) { return p.handle.released(); })
      .def_property_readonly("stored", [](const Push& p) { return p.handle.stored(); });
  py::class_<Fetch>(m, "Fetch")
      .def_readonly("step", &Fetch::step)
      .def("wait", &Fetch::Wait, py::arg("timeout") = py::none(),
           "Blocks until the array is filled and returns it. At most `timeout` seconds (None: "
           "the client's wait_timeout): then DeadlineExceeded says what adjsnapd reports the fetch "
           "waits for, and the fetch goes on (it may still fill the array).")
      .def_property_readonly("done", [](const Fetch& f) { return f.handle.done(); });

  py::class_<adjsnap::Client, std::shared_ptr<adjsnap::Client>>(m, "Client")
      .def(py::init(&Connect), py::arg("socket") = "", py::arg("name") = "python",
           py::arg("map_host_tier") = true, py::arg("reconnect_timeout") = py::none(),
           py::arg("copy_threads") = 0, py::arg("wait_timeout") = py::none(),
           "Connects to adjsnapd ($ADJSNAP_SOCKET or the default socket when `socket` is empty). "
           "reconnect_timeout: seconds to keep reconnecting when adjsnapd restarts (pushes and "
           "fetches wait meanwhile); default 60 or $ADJSNAP_RECONNECT_TIMEOUT, 0 = fail at once. "
           "copy_threads: threads that copy a large array into or out of the mapped host tier; "
           "0 = min(4, cores), $ADJSNAP_COPY_THREADS overrides it. wait_timeout: seconds a "
           "wait with no timeout of its own waits before DeadlineExceeded; default 600 or "
           "$ADJSNAP_WAIT_TIMEOUT, 0 = for ever.")
      .def("open_run",
           [](adjsnap::Client& c, const adjsnap::RunSpec& spec) {
             return Call([&] { return c.OpenRun(spec); });
           })
      .def("close_run",
           [](adjsnap::Client& c, const std::string& n) { Call([&] { return c.CloseRun(n); }); })
      .def("delete_run",
           [](adjsnap::Client& c, const std::string& n) { Call([&] { return c.DeleteRun(n); }); })
      .def("delete_snapshot",
           [](adjsnap::Client& c, const std::string& n, uint64_t step) {
             Call([&] { return c.DeleteSnapshot(n, step); });
           })
      .def("runs", [](adjsnap::Client& c) { return Call([&] { return c.ListRuns(); }); })
      .def("locate",
           [](adjsnap::Client& c, const std::string& n, uint64_t step) {
             return Call([&] { return c.Locate(n, step); });
           })
      .def("snapshots",
           [](adjsnap::Client& c, const std::string& n) {
             return Call([&] { return c.ListSnapshots(n); });
           })
      .def("prefetch",
           [](adjsnap::Client& c, const std::string& n, const std::vector<uint64_t>& steps) {
             return Call([&] { return c.Prefetch(n, steps); });
           })
      .def("tiers", [](adjsnap::Client& c) { return Call([&] { return c.Tiers(); }); })
      .def(
          "push",
          [](adjsnap::Client& c, uint64_t run_id, uint64_t step, py::object array) {
            auto p = std::make_unique<Push>();
            if (std::optional<DeviceBytes> d = DeviceView(array, false, "push")) {
              p->handle = Call([&] {
                return c.PushDevice(run_id, step, d->data, d->size, d->stream);
              });
            } else {
              p->view = View(array, false, "push");
              p->handle = Call([&] { return c.Push(run_id, step, p->view.data, p->view.size); });
            }
            p->array = std::move(array);
            p->step = step;
            return p;
          },
          py::arg("run_id"), py::arg("step"), py::arg("array"))
      .def(
          "fetch_async",
          [](adjsnap::Client& c, uint64_t run_id, uint64_t step, py::object array) {
            auto f = std::make_unique<Fetch>();
            if (std::optional<DeviceBytes> d = DeviceView(array, true, "fetch")) {
              f->handle = Call([&] {
                return c.FetchDeviceAsync(run_id, step, d->data, d->size, d->stream);
              });
            } else {
              f->view = View(array, true, "fetch");
              f->handle = Call([&] {
                return c.FetchAsync(run_id, step, f->view.data, f->view.size);
              });
            }
            f->array = std::move(array);
            f->step = step;
            return f;
          },
          py::arg("run_id"), py::arg("step"), py::arg("out"))
      .def_property_readonly("socket_path", &adjsnap::Client::socket_path)
      .def_property_readonly("data_path",
                             [](const adjsnap::Client& c) {
                               return c.data_path() == adjsnap::DataPath::kMappedHostTier
                                          ? "mapped"
                                          : "ucx";
                             })
      .def_property_readonly("data_path_reason", &adjsnap::Client::data_path_reason)
      .def_property_readonly("copy_threads", &adjsnap::Client::copy_threads);
  m.def("run_adjoint_online", &RunAdjointOnline, py::arg("client"), py::arg("name"),
        py::arg("state"), py::arg("advance"), py::arg("reverse"), py::arg("is_last"),
        py::arg("slots") = 0, py::arg("local") = false, py::arg("max_steps") = 0,
        "RunAdjoint's online mode (adjsnap/adjoint.h); adjsnap.run_adjoint_online documents it.");
}
