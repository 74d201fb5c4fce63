// UCX's functions, forwarded to libucp.so.0 opened with dlopen.
//
// Note [UCX loaded on demand]: the UCP headers declare these functions with C linkage; the
// definitions below satisfy the transport's references at link time, so no binary links libucp.
// Each forwards through a pointer that LoadUcxLibrary() resolved. CreateUcxTransport calls
// LoadUcxLibrary() before any other UCX call, so a forwarder that finds its pointer unset is a
// programming error (a CHECK), except ucs_status_string, which error messages may call anyway.
// RTLD_LOCAL keeps UCX's symbols out of the global namespace (nothing else should bind to them),
// and the library is never closed: UCX keeps threads and hooks that outlive a context.
#include "paddle/collective/transport/ucx/ucx_library.h"

#include <dlfcn.h>
#include <ucp/api/ucp.h>

#include <cstdlib>
#include <mutex>
#include <string>

#include "absl/strings/str_cat.h"
#include "paddle/core/logging.h"
#include "paddle/core/settings.h"

namespace paddle {
namespace {

// X(name) for every UCX function the transport calls.
// clang-format off
#define PADDLE_UCX_FUNCTIONS(X) \
  X(ucp_config_read) \
  X(ucp_config_modify) \
  X(ucp_config_release) \
  X(ucp_init_version) \
  X(ucp_cleanup) \
  X(ucp_worker_create) \
  X(ucp_worker_destroy) \
  X(ucp_worker_get_address) \
  X(ucp_worker_release_address) \
  X(ucp_worker_progress) \
  X(ucp_worker_get_efd) \
  X(ucp_worker_arm) \
  X(ucp_worker_set_am_recv_handler) \
  X(ucp_ep_create) \
  X(ucp_ep_close_nbx) \
  X(ucp_am_send_nbx) \
  X(ucp_tag_send_nbx) \
  X(ucp_tag_recv_nbx) \
  X(ucp_request_check_status) \
  X(ucp_request_cancel) \
  X(ucp_request_free) \
  X(ucs_status_string)
// clang-format on

struct UcxFunctions {
// NOLINTNEXTLINE(bugprone-macro-parentheses): `name` is an identifier here, not an expression
#define PADDLE_UCX_POINTER(name) decltype(&::name) name = nullptr;
  PADDLE_UCX_FUNCTIONS(PADDLE_UCX_POINTER)
#undef PADDLE_UCX_POINTER
};

UcxFunctions& Functions() {
  static UcxFunctions functions;
  return functions;
}

absl::Status MissingFunction(const std::string& library, const char* name) {
  const char* error = dlerror();
  return absl::FailedPreconditionError(absl::StrCat(
      library, " has no function ", name, " (", error != nullptr ? error : "dlsym failed",
      "): UCX 1.10 or later is needed; or use PADDLE_TRANSPORT=tcp|shm|auto"));
}

absl::Status Load() {
  const std::string library = StringSetting("PADDLE_UCX_LIBRARY").value_or("libucp.so.0");
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* error = dlerror();
    return absl::FailedPreconditionError(absl::StrCat(
        "PADDLE_TRANSPORT=ucx needs UCX's libucp, and loading ", library,
        " failed: ", error != nullptr ? error : "unknown dlopen error",
        "; install libucx0 (Debian) or set PADDLE_UCX_LIBRARY to the library's path, or use "
        "PADDLE_TRANSPORT=tcp|shm|auto"));
  }
  UcxFunctions functions;
#define PADDLE_UCX_RESOLVE(name)                                              \
  functions.name = reinterpret_cast<decltype(&::name)>(dlsym(handle, #name)); \
  if (functions.name == nullptr) return MissingFunction(library, #name);
  PADDLE_UCX_FUNCTIONS(PADDLE_UCX_RESOLVE)
#undef PADDLE_UCX_RESOLVE
  Functions() = functions;
  return absl::OkStatus();
}

template <typename F>
F Resolved(F f, const char* name) {
  PADDLE_CHECK(f != nullptr) << "UCX function " << name
                             << " called before LoadUcxLibrary() succeeded";
  return f;
}

}  // namespace

absl::Status LoadUcxLibrary() {
  static std::once_flag once;
  static absl::Status* status = nullptr;
  std::call_once(once, [] { status = new absl::Status(Load()); });
  return *status;
}

}  // namespace paddle

// The forwarders. Their signatures are the UCP headers' (a mismatch fails to compile, since the
// headers declare the same names).
#define PADDLE_UCX_CALL(name) ::paddle::Resolved(::paddle::Functions().name, #name)

ucs_status_t ucp_config_read(const char* env_prefix, const char* filename,
                             ucp_config_t** config_p) {
  return PADDLE_UCX_CALL(ucp_config_read)(env_prefix, filename, config_p);
}
ucs_status_t ucp_config_modify(ucp_config_t* config, const char* name, const char* value) {
  return PADDLE_UCX_CALL(ucp_config_modify)(config, name, value);
}
void ucp_config_release(ucp_config_t* config) { PADDLE_UCX_CALL(ucp_config_release)(config); }
ucs_status_t ucp_init_version(unsigned api_major_version, unsigned api_minor_version,
                              const ucp_params_t* params, const ucp_config_t* config,
                              ucp_context_h* context_p) {
  return PADDLE_UCX_CALL(ucp_init_version)(api_major_version, api_minor_version, params, config,
                                           context_p);
}
void ucp_cleanup(ucp_context_h context_p) { PADDLE_UCX_CALL(ucp_cleanup)(context_p); }
ucs_status_t ucp_worker_create(ucp_context_h context, const ucp_worker_params_t* params,
                               ucp_worker_h* worker_p) {
  return PADDLE_UCX_CALL(ucp_worker_create)(context, params, worker_p);
}
void ucp_worker_destroy(ucp_worker_h worker) { PADDLE_UCX_CALL(ucp_worker_destroy)(worker); }
ucs_status_t ucp_worker_get_address(ucp_worker_h worker, ucp_address_t** address_p,
                                    size_t* address_length_p) {
  return PADDLE_UCX_CALL(ucp_worker_get_address)(worker, address_p, address_length_p);
}
void ucp_worker_release_address(ucp_worker_h worker, ucp_address_t* address) {
  PADDLE_UCX_CALL(ucp_worker_release_address)(worker, address);
}
unsigned ucp_worker_progress(ucp_worker_h worker) {
  return PADDLE_UCX_CALL(ucp_worker_progress)(worker);
}
ucs_status_t ucp_worker_get_efd(ucp_worker_h worker, int* fd) {
  return PADDLE_UCX_CALL(ucp_worker_get_efd)(worker, fd);
}
ucs_status_t ucp_worker_arm(ucp_worker_h worker) { return PADDLE_UCX_CALL(ucp_worker_arm)(worker); }
ucs_status_t ucp_worker_set_am_recv_handler(ucp_worker_h worker,
                                            const ucp_am_handler_param_t* param) {
  return PADDLE_UCX_CALL(ucp_worker_set_am_recv_handler)(worker, param);
}
ucs_status_t ucp_ep_create(ucp_worker_h worker, const ucp_ep_params_t* params, ucp_ep_h* ep_p) {
  return PADDLE_UCX_CALL(ucp_ep_create)(worker, params, ep_p);
}
ucs_status_ptr_t ucp_ep_close_nbx(ucp_ep_h ep, const ucp_request_param_t* param) {
  return PADDLE_UCX_CALL(ucp_ep_close_nbx)(ep, param);
}
ucs_status_ptr_t ucp_am_send_nbx(ucp_ep_h ep, unsigned id, const void* header, size_t header_length,
                                 const void* buffer, size_t count,
                                 const ucp_request_param_t* param) {
  return PADDLE_UCX_CALL(ucp_am_send_nbx)(ep, id, header, header_length, buffer, count, param);
}
ucs_status_ptr_t ucp_tag_send_nbx(ucp_ep_h ep, const void* buffer, size_t count, ucp_tag_t tag,
                                  const ucp_request_param_t* param) {
  return PADDLE_UCX_CALL(ucp_tag_send_nbx)(ep, buffer, count, tag, param);
}
ucs_status_ptr_t ucp_tag_recv_nbx(ucp_worker_h worker, void* buffer, size_t count, ucp_tag_t tag,
                                  ucp_tag_t tag_mask, const ucp_request_param_t* param) {
  return PADDLE_UCX_CALL(ucp_tag_recv_nbx)(worker, buffer, count, tag, tag_mask, param);
}
ucs_status_t ucp_request_check_status(void* request) {
  return PADDLE_UCX_CALL(ucp_request_check_status)(request);
}
void ucp_request_cancel(ucp_worker_h worker, void* request) {
  PADDLE_UCX_CALL(ucp_request_cancel)(worker, request);
}
void ucp_request_free(void* request) { PADDLE_UCX_CALL(ucp_request_free)(request); }
const char* ucs_status_string(ucs_status_t status) {
  // Error paths may format a status before (or without) a loaded library.
  if (::paddle::Functions().ucs_status_string == nullptr) return "(UCX not loaded)";
  return ::paddle::Functions().ucs_status_string(status);
}
