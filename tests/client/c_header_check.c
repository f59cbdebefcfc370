/* Compiles tierpool/c.h as C11 with every warning an error: the header must stay plain C. */
#include "tierpool/c.h"

#include <stdio.h>

int tierpool_c_header_check(const char* socket_path);
int tierpool_c_header_check(const char* socket_path) {
  tp_client_options options;
  tp_client_options_init(&options);
  options.socket_path = socket_path;
  tp_client* client = NULL;
  char* error = NULL;
  if (tp_connect(&options, &client, &error) != TP_OK) {
    fprintf(stderr, "%s\n", error);
    tp_free(error);
    return 1;
  }
  tp_code code = tp_put(client, "k", "v", 1, NULL, NULL);
  tp_close(client);
  return code == TP_OK ? 0 : 1;
}
