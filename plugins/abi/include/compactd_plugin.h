/*
 * compactd strategy plugin ABI, version 1.
 *
 * A plugin is a shared library that exports one function,
 * `compactd_plugin_v1`, returning a pointer to a static table that lives as
 * long as the library (the host never unloads a plugin library).
 *
 * Data crosses as protobuf bytes of the messages in
 * proto/compactd/plugin/v1/plugin.proto (AnalyzeRequest in, AnalyzeResponse
 * out), whose threads and summaries are the gRPC API's own messages.
 *
 * Ownership: every pointer the host passes in is borrowed for the duration
 * of the call and must not be kept. Every byte the plugin hands back is
 * written through the host's `compactd_write_fn` callback, which copies it
 * before returning: nothing is ever freed across allocators.
 *
 * Evolution is append-only. New functions are added at the end of
 * `compactd_plugin` with a new minor version; the host reads a member only
 * when `struct_size` says the plugin's table has it. A new major version is
 * incompatible, and the host refuses to start with such a plugin.
 * The protobuf messages evolve on their own, append-only (see plugin.proto):
 * a new message or field (such as ExternalizeProposal and
 * Proposal.estimated_tokens_freed) leaves this table as it is, and so does
 * not change COMPACTD_PLUGIN_ABI_MINOR.
 *
 * Threading: `analyze` may be called from several host threads at once on
 * the same instance; an instance must be safe for that (or lock inside).
 * A call that does not return within the host's timeout takes the plugin
 * out of rotation.
 */
#ifndef COMPACTD_PLUGIN_H
#define COMPACTD_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define COMPACTD_PLUGIN_ABI_MAJOR 1u
#define COMPACTD_PLUGIN_ABI_MINOR 0u

/* The symbol the host looks up. */
#define COMPACTD_PLUGIN_ENTRY_SYMBOL "compactd_plugin_v1"

/* What a call ended with. Anything but COMPACTD_OK: the message written
 * through the callback (UTF-8, no message content) is the reason. */
typedef enum compactd_status {
  COMPACTD_OK = 0,
  /* The input (config or request) is not what the plugin accepts. */
  COMPACTD_INVALID_ARGUMENT = 1,
  /* The plugin failed. */
  COMPACTD_INTERNAL = 2,
  /* The plugin panicked (the Rust SDK's wrapper reports this). */
  COMPACTD_PANIC = 3
} compactd_status;

/* Borrowed bytes: valid for the duration of the call only. */
typedef struct compactd_bytes {
  const uint8_t *ptr;
  size_t len;
} compactd_bytes;

/* The host's output callback: appends `len` bytes at `data` to what `sink`
 * has received, copying them before it returns. May be called any number of
 * times during one call; never after the call returned. */
typedef void (*compactd_write_fn)(void *sink, const uint8_t *data, size_t len);

typedef struct compactd_plugin {
  /* sizeof(compactd_plugin) as the plugin was compiled: which members exist. */
  size_t struct_size;
  /* COMPACTD_PLUGIN_ABI_MAJOR / _MINOR as the plugin was compiled. */
  uint32_t abi_major;
  uint32_t abi_minor;
  /* Static, NUL-terminated UTF-8: e.g. "sql-results" and "0.1.0". */
  const char *name;
  const char *version;

  /* Creates an instance from its configuration (JSON text, borrowed; "{}"
   * when none is configured). On COMPACTD_OK, `*instance` is set (it may be
   * NULL for a stateless plugin); otherwise the reason is written to `err`. */
  compactd_status (*create)(compactd_bytes config, void **instance, void *err,
                            compactd_write_fn write);

  /* Destroys an instance made by `create`. Called at most once per
   * instance; never while a call on it is running. */
  void (*destroy)(void *instance);

  /* Analyzes one AnalyzeRequest (protobuf, borrowed). On COMPACTD_OK the
   * AnalyzeResponse (protobuf) was written to `out`; otherwise the reason. */
  compactd_status (*analyze)(void *instance, compactd_bytes request, void *out,
                             compactd_write_fn write);
} compactd_plugin;

/* The one exported function. */
typedef const compactd_plugin *(*compactd_plugin_entry_fn)(void);

#ifdef __cplusplus
}
#endif

#endif /* COMPACTD_PLUGIN_H */
