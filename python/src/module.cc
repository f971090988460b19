// gradsync._gradsync: the C++ client library for Python. NumPy arrays come through the buffer
// protocol and torch tensors through their data_ptr(), so that this module needs neither NumPy's
// nor torch's headers; what gradsync cannot take is refused here, before anything is sent. Every
// call that waits releases the GIL. A ClientError becomes the exception class of its code, each a
// subclass of gradsync.Error.
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <optional>
#include <string>
#include <string_view>

#include "client/gradsync_client.h"

namespace py = pybind11;

namespace gradsync {
namespace {

using Release = py::call_guard<py::gil_scoped_release>;

// The exception classes, by code; `Error` is their base.
std::map<ErrorCode, PyObject*>& exception_classes() {
  static std::map<ErrorCode, PyObject*> classes;
  return classes;
}

void add_exception_classes(py::module_& module) {
  static PyObject* base = PyErr_NewException("gradsync.Error", PyExc_RuntimeError, nullptr);
  module.attr("Error") = py::handle(base);
  // Where Python has a class of its own for the failure, the code's class is that one too, so
  // that `except TimeoutError` and `except ValueError` catch them as they catch the others'.
  struct Named {
    ErrorCode code;
    const char* name;
    PyObject* also = nullptr;
  };
  const Named named[] = {
      {ErrorCode::invalid_argument, "InvalidArgument", PyExc_ValueError},
      {ErrorCode::mismatch, "Mismatch"},
      {ErrorCode::peer_lost, "PeerLost"},
      {ErrorCode::deadline_exceeded, "DeadlineExceeded", PyExc_TimeoutError},
      {ErrorCode::protocol_error, "ProtocolError"},
      {ErrorCode::aborted, "Aborted"},
      {ErrorCode::unauthenticated, "Unauthenticated"},
      {ErrorCode::group_changed, "GroupChanged"},
      {ErrorCode::internal, "Internal"},
  };
  for (const Named& each : named) {
    const py::object bases =
        each.also != nullptr ? py::object(py::make_tuple(py::handle(base), py::handle(each.also)))
                             : py::reinterpret_borrow<py::object>(base);
    PyObject* type =
        PyErr_NewException(("gradsync." + std::string(each.name)).c_str(), bases.ptr(), nullptr);
    if (type == nullptr) throw py::error_already_set();
    exception_classes()[each.code] = type;
    module.attr(each.name) = py::handle(type);
  }
  py::register_exception_translator([](std::exception_ptr thrown) {
    try {
      if (thrown) std::rethrow_exception(thrown);
    } catch (const ClientError& error) {
      const auto found = exception_classes().find(error.code());
      PyErr_SetString(found != exception_classes().end() ? found->second : base,
                      error.status().message().c_str());
    }
  });
}

OpOptions op_options(const std::string& op, const std::string& algorithm, double timeout_s,
                     const std::string& name, int root, const std::string& wire) {
  OpOptions options;
  const auto reduce_op = parse_reduce_op(op);
  if (!reduce_op) throw py::value_error("unknown reduce op '" + op + "'");
  options.op = *reduce_op;
  if (!algorithm.empty() && algorithm != "auto") {
    options.algorithm = parse_algorithm(algorithm);
    if (!options.algorithm || *options.algorithm == Algorithm::probe) {
      throw py::value_error("unknown algorithm '" + algorithm + "'");
    }
  }
  if (timeout_s > 0) {
    options.timeout = std::chrono::milliseconds(static_cast<long long>(timeout_s * 1000 + 0.5));
  }
  options.name = name;
  options.root = root;
  if (!wire.empty()) {
    options.wire = parse_data_type(wire);
    if (options.wire != DataType::bf16 && options.wire != DataType::f16) {
      throw py::value_error("wire must be 'bf16' or 'f16', not '" + wire + "'");
    }
  }
  return options;
}

// A tensor an op reads or writes: its address, element count and dtype. NumPy arrays (and
// whatever else exports a buffer) come through the buffer protocol in one call; torch tensors,
// which export none, through data_ptr(). What gradsync cannot take is a TypeError naming why.
struct Memory {
  void* address = nullptr;
  std::size_t count = 0;
  DataType dtype = DataType::f32;
};

constexpr std::string_view kTakenTypes =
    "float16, bfloat16 (torch), float32, float64, complex64, complex128, int8, int16, int32, "
    "int64, uint8 and bool";

DataType dtype_of_format(const py::object& tensor, const std::string& format, py::ssize_t itemsize,
                         const char* what) {
  // "f", or "<f", "=f", "@f" (little-endian, as this machine is); "Zf" is complex; never ">f".
  std::string_view code = format;
  if (!code.empty() && (code.front() == '<' || code.front() == '=' || code.front() == '@')) {
    code.remove_prefix(1);
  }
  if (code == "Zf") return DataType::c64;
  if (code == "Zd") return DataType::c128;
  switch (code.size() == 1 ? code.front() : '\0') {
    case '?':
      return DataType::boolean;
    case 'b':
      return DataType::i8;
    case 'h':
      return DataType::i16;
    case 'e':
      return DataType::f16;
    case 'f':
      return DataType::f32;
    case 'd':
      return DataType::f64;
    case 'B':
      return DataType::u8;
    case 'i':
    case 'l':
    case 'q':
      if (itemsize == 4) return DataType::i32;
      if (itemsize == 8) return DataType::i64;
      break;
    default:
      break;
  }
  // NumPy's own name of the dtype where there is one: "uint16" says more than "H".
  const std::string type = py::hasattr(tensor, "dtype")
                               ? "dtype " + py::str(tensor.attr("dtype")).cast<std::string>()
                               : "buffer format '" + format + "'";
  throw py::type_error(std::string(what) + " has " + type + "; gradsync takes " +
                       std::string(kTakenTypes));
}

Memory torch_memory(const py::object& tensor, const char* what) {
  if (tensor.attr("device").attr("type").cast<std::string>() != "cpu") {
    throw py::type_error(std::string(what) + " is on " +
                         py::str(tensor.attr("device")).cast<std::string>() +
                         "; gradsync takes CPU tensors");
  }
  if (!tensor.attr("is_contiguous")().cast<bool>()) {
    throw py::type_error(std::string(what) + " is not contiguous; call .contiguous() first");
  }
  std::string dtype = py::str(tensor.attr("dtype")).cast<std::string>();
  dtype.erase(0, dtype.find('.') + 1);  // "torch.float32"
  static const std::map<std::string, DataType> kTorchTypes = {
      {"float16", DataType::f16},  {"bfloat16", DataType::bf16}, {"float32", DataType::f32},
      {"float64", DataType::f64},  {"int32", DataType::i32},     {"int64", DataType::i64},
      {"uint8", DataType::u8},     {"int8", DataType::i8},       {"int16", DataType::i16},
      {"bool", DataType::boolean}, {"complex64", DataType::c64}, {"complex128", DataType::c128}};
  const auto found = kTorchTypes.find(dtype);
  if (found == kTorchTypes.end()) {
    throw py::type_error(std::string(what) + " has dtype " + dtype + "; gradsync takes " +
                         std::string(kTakenTypes));
  }
  return {reinterpret_cast<void*>(tensor.attr("data_ptr")().cast<std::uintptr_t>()),
          tensor.attr("numel")().cast<std::size_t>(), found->second};
}

Memory memory_of(const py::object& tensor, const char* what, bool writable) {
  if (PyObject_CheckBuffer(tensor.ptr())) {
    Py_buffer view;
    const int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(tensor.ptr(), &view, flags) != 0) {
      PyErr_Clear();
      Py_buffer plain;
      if (PyObject_GetBuffer(tensor.ptr(), &plain, PyBUF_SIMPLE) == 0) {
        const bool read_only = plain.readonly != 0;
        PyBuffer_Release(&plain);
        if (read_only && writable) {
          throw py::type_error(std::string(what) +
                               " is read-only; the op writes its result into it");
        }
      } else {
        PyErr_Clear();
      }
      throw py::type_error(std::string(what) + " is not C-contiguous; use numpy.ascontiguousarray");
    }
    Memory memory;
    try {
      memory = {
          view.buf, static_cast<std::size_t>(view.len / std::max<py::ssize_t>(view.itemsize, 1)),
          dtype_of_format(tensor, view.format != nullptr ? view.format : "B", view.itemsize, what)};
    } catch (...) {
      PyBuffer_Release(&view);
      throw;
    }
    PyBuffer_Release(&view);  // the caller keeps the object alive for the op
    return memory;
  }
  if (py::hasattr(tensor, "data_ptr") && py::hasattr(tensor, "is_contiguous")) {
    return torch_memory(tensor, what);
  }
  throw py::type_error(std::string(what) + " is a " +
                       py::str(py::type::of(tensor).attr("__name__")).cast<std::string>() +
                       "; gradsync takes NumPy arrays and torch CPU tensors");
}

// An input and an output of one dtype.
std::pair<Memory, Memory> memory_pair(const py::object& input, const py::object& output) {
  const Memory in = memory_of(input, "the input", false);
  const Memory out = memory_of(output, "the output", true);
  if (in.dtype != out.dtype) {
    throw py::type_error("the input is " + std::string(name(in.dtype)) + " and the output " +
                         std::string(name(out.dtype)) + "; they must have one dtype");
  }
  return {in, out};
}

// The root's side of a gather's output or a scatter's input, which the other ranks may leave out
// (None): then every rank's chunk is as long as `chunk`, and there are world-size chunks.
Memory rooted_memory(const Client& client, const py::object& tensor, const std::string& what,
                     const Memory& chunk, int root, bool writable) {
  if (!tensor.is_none()) {
    const Memory memory = memory_of(tensor, ("the " + what).c_str(), writable);
    if (memory.dtype != chunk.dtype) {
      const DataType input = writable ? chunk.dtype : memory.dtype;
      const DataType output = writable ? memory.dtype : chunk.dtype;
      throw py::type_error("the input is " + std::string(name(input)) + " and the output " +
                           std::string(name(output)) + "; they must have one dtype");
    }
    return memory;
  }
  if (client.rank() == root) {
    throw py::value_error("the root (rank " + std::to_string(root) + ") needs the " + what);
  }
  return {nullptr, chunk.count * static_cast<std::size_t>(client.world_size()), chunk.dtype};
}

// The daemon reads or writes exactly this rank's chunk of `total` elements: memory of another
// size would be overrun, so it is refused before anything is sent.
void check_chunk(const Client& client, std::size_t have, std::size_t total, const char* what) {
  const std::size_t p = static_cast<std::size_t>(client.world_size());
  const std::size_t rank = static_cast<std::size_t>(client.rank());
  const std::size_t wanted = total / p + (rank < total % p ? 1 : 0);
  if (have != wanted) {
    throw py::value_error(std::string(what) + " holds " + std::to_string(have) +
                          " elements; rank " + std::to_string(rank) + "'s chunk of " +
                          std::to_string(total) + " elements is " + std::to_string(wanted));
  }
}

py::dict status_dict(const DaemonStatus& status) {
  py::dict result;
  result["rank"] = status.rank;
  result["world_size"] = status.world_size;
  result["generation"] = status.generation;
  result["data_addresses"] = status.data_addresses;
  result["clients"] = status.clients;
  result["job"] = status.job;
  result["submitter_pid"] = status.submitter_pid;
  result["ops_served"] = status.ops_served;
  result["ops_failed"] = status.ops_failed;
  result["heartbeat_age_ms"] = status.heartbeat_age_ms;
  result["coordinator"] = status.coordinator.ok() ? "connected" : status.coordinator.to_string();
  result["uptime_s"] = status.uptime_s;
  return result;
}

// Client::group()'s default, in the seconds Python speaks.
constexpr double kDefaultGroupTimeoutSeconds =
    std::chrono::duration<double>(kDefaultGroupTimeout).count();

// The collectives every rank takes part in alike, on Client: each returns the op's Handle at once.
void add_collectives(py::class_<Client>& client) {
  client
      .def(
          "allreduce",
          [](Client& client, const py::object& tensor, const OpOptions& options) {
            const Memory data = memory_of(tensor, "the tensor", true);
            py::gil_scoped_release release;
            return client.allreduce_async(data.address, data.count, data.dtype, options);
          },
          py::keep_alive<0, 1>())
      .def(
          "reduce_scatter",
          [](Client& client, const py::object& input, const py::object& output,
             const OpOptions& options) {
            const auto [in, out] = memory_pair(input, output);
            check_chunk(client, out.count, in.count, "the output");
            py::gil_scoped_release release;
            return client.reduce_scatter_async(in.address, in.count, out.address, in.dtype,
                                               options);
          },
          py::keep_alive<0, 1>())
      .def(
          "allgather",
          [](Client& client, const py::object& input, const py::object& output,
             const OpOptions& options) {
            const auto [in, out] = memory_pair(input, output);
            check_chunk(client, in.count, out.count, "the input");
            py::gil_scoped_release release;
            return client.allgather_async(in.address, out.address, out.count, in.dtype, options);
          },
          py::keep_alive<0, 1>())
      .def(
          "broadcast",
          [](Client& client, const py::object& tensor, const OpOptions& options) {
            const Memory data = memory_of(tensor, "the tensor", true);
            py::gil_scoped_release release;
            return client.broadcast_async(data.address, data.count, data.dtype, options);
          },
          py::keep_alive<0, 1>())
      .def(
          "alltoall",
          [](Client& client, const py::object& input, const py::object& output,
             const OpOptions& options) {
            const auto [in, out] = memory_pair(input, output);
            const std::size_t p = static_cast<std::size_t>(client.world_size());
            if (in.count != out.count || in.count % p != 0) {
              throw py::value_error(
                  "alltoall needs input and output of the same size, a "
                  "multiple of " +
                  std::to_string(p) + " elements; got " + std::to_string(in.count) + " and " +
                  std::to_string(out.count));
            }
            py::gil_scoped_release release;
            return client.alltoall_async(in.address, out.address, in.count / p, in.dtype, options);
          },
          py::keep_alive<0, 1>())
      .def(
          "alltoallv",
          [](Client& client, const py::object& input, std::vector<std::uint64_t> send_counts,
             const py::object& output, std::vector<std::uint64_t> recv_counts,
             const OpOptions& options) {
            const auto [in, out] = memory_pair(input, output);
            const auto sum = [](const std::vector<std::uint64_t>& counts) {
              return std::accumulate(counts.begin(), counts.end(), std::uint64_t{0});
            };
            if (sum(send_counts) != in.count || sum(recv_counts) != out.count) {
              throw py::value_error(
                  "alltoallv's counts must add up to its tensors: the send counts add up to " +
                  std::to_string(sum(send_counts)) + " for an input of " +
                  std::to_string(in.count) + " elements, the receive counts to " +
                  std::to_string(sum(recv_counts)) + " for an output of " +
                  std::to_string(out.count));
            }
            py::gil_scoped_release release;
            return client.alltoallv_async(in.address, send_counts, out.address, recv_counts,
                                          in.dtype, options);
          },
          py::keep_alive<0, 1>())
      .def("barrier", &Client::barrier, Release());
}

// Reduce, gather and scatter: the root's side may be None elsewhere (rooted_memory).
void add_rooted_collectives(py::class_<Client>& client) {
  client
      .def(
          "reduce",
          [](Client& client, const py::object& tensor, const OpOptions& options) {
            const Memory data = memory_of(tensor, "the tensor", true);
            py::gil_scoped_release release;
            return client.reduce_async(data.address, data.count, data.dtype, options);
          },
          py::keep_alive<0, 1>())
      .def(
          "gather",
          [](Client& client, const py::object& input, const py::object& output,
             const OpOptions& options) {
            const Memory in = memory_of(input, "the input", false);
            const Memory out = rooted_memory(client, output, "output", in, options.root, true);
            check_chunk(client, in.count, out.count, "the input");
            py::gil_scoped_release release;
            return client.gather_async(in.address, out.address, out.count, in.dtype, options);
          },
          py::keep_alive<0, 1>())
      .def(
          "scatter",
          [](Client& client, const py::object& input, const py::object& output,
             const OpOptions& options) {
            const Memory out = memory_of(output, "the output", true);
            const Memory in = rooted_memory(client, input, "input", out, options.root, false);
            check_chunk(client, out.count, in.count, "the output");
            py::gil_scoped_release release;
            return client.scatter_async(in.address, out.address, in.count, out.dtype, options);
          },
          py::keep_alive<0, 1>());
}

// Point to point: a send reads its tensor, a receive writes it.
void add_point_to_point(py::class_<Client>& client) {
  client
      .def(
          "send",
          [](Client& client, const py::object& tensor, int peer, std::int64_t tag,
             const OpOptions& options) {
            const Memory data = memory_of(tensor, "the tensor", false);
            py::gil_scoped_release release;
            return client.send_async(data.address, data.count, data.dtype, peer, tag, options);
          },
          py::keep_alive<0, 1>())
      .def(
          "receive",
          [](Client& client, const py::object& tensor, int peer, std::int64_t tag,
             const OpOptions& options) {
            const Memory data = memory_of(tensor, "the tensor", true);
            py::gil_scoped_release release;
            return client.receive_async(data.address, data.count, data.dtype, peer, tag, options);
          },
          py::keep_alive<0, 1>());
}

}  // namespace
}  // namespace gradsync

// What this defines, python/gradsync/_gradsync.pyi declares for type checkers: the two change
// together.
PYBIND11_MODULE(_gradsync, module) {
  using namespace gradsync;
  module.attr("DEFAULT_GROUP_TIMEOUT") = kDefaultGroupTimeoutSeconds;
  module.doc() = "The gradsync client library (see the gradsync package)";
  add_exception_classes(module);

  py::class_<SharedTensor>(module, "SharedTensor", py::buffer_protocol())
      .def_property_readonly("nbytes", &SharedTensor::size)
      .def_property_readonly("address",
                             [](const SharedTensor& tensor) {
                               return reinterpret_cast<std::uintptr_t>(tensor.data());
                             })
      .def_buffer([](SharedTensor& tensor) {
        return py::buffer_info(tensor.data(), 1, py::format_descriptor<std::uint8_t>::format(), 1,
                               {tensor.size()}, {1});
      });

  py::class_<Handle>(module, "Handle")
      .def("wait", &Handle::wait, Release())
      .def_property_readonly(
          "algorithm", [](const Handle& handle) { return std::string(name(handle.algorithm())); })
      .def_property_readonly("elapsed_us", &Handle::elapsed_us);

  py::class_<Client> client(module, "Client");
  client
      .def(py::init([](const std::string& socket, std::optional<double> timeout_s,
                       std::optional<int> local_rank, const std::string& job,
                       const std::string& stream, std::vector<int> members) {
             ConnectOptions options;
             // Without a timeout, the library's default.
             if (timeout_s) {
               options.timeout =
                   std::chrono::milliseconds(static_cast<long long>(*timeout_s * 1000 + 0.5));
             }
             options.local_rank = local_rank;
             options.job = job;
             options.stream = stream;
             options.members = std::move(members);
             return Client::connect(socket, options);
           }),
           py::arg("socket"), py::arg("timeout"), py::arg("local_rank"), py::arg("job"),
           py::arg("stream"), py::arg("members"), Release())
      .def("close", &Client::close, Release())
      .def_property_readonly("job", &Client::job)
      .def_property_readonly("stream", &Client::stream)
      .def_property_readonly("rank", &Client::rank)
      .def_property_readonly("world_size", &Client::world_size)
      .def_property_readonly("members", &Client::members)
      .def_property_readonly("local_rank", &Client::local_rank)
      .def_property_readonly("local_world_size", &Client::local_world_size)
      .def_property_readonly("generation", &Client::generation)
      .def(
          "group",
          [](Client& client, double timeout_s) {
            client.group(std::chrono::milliseconds(static_cast<long long>(timeout_s * 1000 + 0.5)));
          },
          py::arg("timeout") = kDefaultGroupTimeoutSeconds, Release())
      .def_property_readonly("daemon_cpus", &Client::daemon_cpus)
      .def_property_readonly("bytes_copied", &Client::bytes_copied)
      .def("plan_text",
           [](Client& client) {
             py::gil_scoped_release release;
             return client.plan().description;
           })
      .def("status",
           [](Client& client) {
             DaemonStatus status;
             {
               py::gil_scoped_release release;
               status = client.status();
             }
             return status_dict(status);
           })
      .def("allocate", &Client::allocate, py::keep_alive<0, 1>(), Release())
      .def("bind_thread_beside_daemon", &Client::bind_thread_beside_daemon);
  add_collectives(client);
  add_rooted_collectives(client);
  add_point_to_point(client);

  py::class_<OpOptions>(module, "OpOptions")
      .def(py::init(&op_options), py::arg("op") = "sum", py::arg("algorithm") = "",
           py::arg("timeout") = 0.0, py::arg("name") = "", py::arg("root") = 0,
           py::arg("wire") = "");
}
