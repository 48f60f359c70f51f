/*
 * A strategy plugin in C: proposes nothing, and so measures what the plugin
 * ABI costs per call (benches/plugin_overhead.rs) and proves the header is
 * usable from C. Build:
 *
 *   cc -std=c11 -Wall -Wextra -Werror -shared -fPIC \
 *      -I plugins/abi/include plugins/examples/c-noop/noop.c -o libc_noop.so
 *
 * Its configuration may set {"reject": true} to make `create` fail, or
 * {"garbage": true} to answer bytes that are not an AnalyzeResponse (tests
 * of the host's error paths). Compiled with -DCOMPACTD_NOOP_ABI_MAJOR=2 it
 * claims a major version the host does not speak (a test of the handshake).
 */
#include <string.h>

#include "compactd_plugin.h"

#ifndef COMPACTD_NOOP_ABI_MAJOR
#define COMPACTD_NOOP_ABI_MAJOR COMPACTD_PLUGIN_ABI_MAJOR
#endif

/* Two static instances: the plugin keeps no other state. */
static int instance_marker;
static int garbage_marker;

/* Whether the borrowed config bytes contain `needle`. */
static int config_has(compactd_bytes config, const char *needle) {
  size_t n = strlen(needle);
  for (size_t i = 0; config.ptr != NULL && i + n <= config.len; i++) {
    if (memcmp(config.ptr + i, needle, n) == 0) {
      return 1;
    }
  }
  return 0;
}

static void say(void *sink, compactd_write_fn write, const char *text) {
  write(sink, (const uint8_t *)text, strlen(text));
}

static compactd_status noop_create(compactd_bytes config, void **instance,
                                   void *err, compactd_write_fn write) {
  if (config_has(config, "\"reject\":true")) {
    say(err, write, "configured to reject");
    return COMPACTD_INVALID_ARGUMENT;
  }
  *instance = config_has(config, "\"garbage\":true") ? (void *)&garbage_marker
                                                     : (void *)&instance_marker;
  return COMPACTD_OK;
}

static void noop_destroy(void *instance) { (void)instance; }

static compactd_status noop_analyze(void *instance, compactd_bytes request,
                                    void *out, compactd_write_fn write) {
  (void)request;
  if (instance == &garbage_marker) {
    /* A field with wire type 7, which protobuf does not have. */
    static const uint8_t junk[] = {0x0f, 0xff, 0xff, 0xff};
    write(out, junk, sizeof(junk));
    return COMPACTD_OK;
  }
  if (instance != &instance_marker) {
    return COMPACTD_INVALID_ARGUMENT;
  }
  /* An empty AnalyzeResponse is zero bytes of protobuf: nothing to write. */
  return COMPACTD_OK;
}

static const compactd_plugin table = {
    .struct_size = sizeof(compactd_plugin),
    .abi_major = COMPACTD_NOOP_ABI_MAJOR,
    .abi_minor = COMPACTD_PLUGIN_ABI_MINOR,
    .name = "c-noop",
    .version = "0.1.0",
    .create = noop_create,
    .destroy = noop_destroy,
    .analyze = noop_analyze,
};

const compactd_plugin *compactd_plugin_v1(void) { return &table; }
