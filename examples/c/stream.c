/* Streams tokens from a WASTE container through the C API.
 *
 *   cc stream.c $(pkg-config --cflags --libs waste) -o stream
 *   ./stream MODEL.waste "prompt text" [TOKENS [BARRIER_DIR]]
 *
 * Opens the model through waste-ioserver (attaching to the daemon that serves it, or starting
 * it), tokenizes the prompt, and prints each token's text as it is generated; a last line on
 * stderr names the daemon. With BARRIER_DIR it writes BARRIER_DIR/ready.PID once attached and
 * waits (up to 60 s) for BARRIER_DIR/go before generating: scripts/ci_package.sh uses that to
 * hold two clients on one daemon at once. */
#define _POSIX_C_SOURCE 200809L /* nanosleep, access, getpid under -std=c11 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <waste.h>

static int print_piece(void *user, int32_t token, const char *piece, size_t len) {
  (void)user;
  (void)token;
  fwrite(piece, 1, len, stdout);
  fflush(stdout);
  return 0; /* continue */
}

static int wait_for_go(const char *dir) {
  char path[4096];
  FILE *ready;
  int i;
  snprintf(path, sizeof path, "%s/ready.%d", dir, (int)getpid());
  ready = fopen(path, "w");
  if (ready == NULL) return 1;
  fclose(ready);
  snprintf(path, sizeof path, "%s/go", dir);
  for (i = 0; i < 6000; ++i) {
    struct timespec ten_ms = {0, 10 * 1000 * 1000};
    if (access(path, F_OK) == 0) return 0;
    nanosleep(&ten_ms, NULL);
  }
  return 1;
}

int main(int argc, char **argv) {
  waste_model *model = NULL;
  waste_open_options options;
  waste_generate_params params;
  waste_generate_result result;
  waste_model_info info;
  int32_t *ids = NULL;
  size_t n_ids = 0;
  int rc = 1;

  if (argc < 3) {
    fprintf(stderr, "usage: %s MODEL.waste PROMPT [TOKENS [BARRIER_DIR]]\n", argv[0]);
    return 2;
  }
  waste_open_options_init(&options);
  options.ctx_tokens = 256;
  if (waste_open(argv[1], &options, &model) != WASTE_OK) {
    fprintf(stderr, "stream: %s\n", waste_last_error());
    return 1;
  }
  waste_model_info_init(&info);
  if (waste_get_model_info(model, &info) != WASTE_OK) goto done;
  if (argc > 4 && wait_for_go(argv[4]) != 0) {
    fprintf(stderr, "stream: no %s/go within 60 s\n", argv[4]);
    goto done;
  }
  if (waste_tokenize(model, argv[2], strlen(argv[2]), WASTE_TOKENIZE_BOS, &ids, &n_ids) != WASTE_OK) goto done;
  waste_generate_params_init(&params);
  params.max_tokens = argc > 3 ? atoi(argv[3]) : 16;
  params.ignore_eos = 1;
  waste_generate_result_init(&result);
  if (waste_generate(model, ids, n_ids, &params, print_piece, NULL, &result) != WASTE_OK) goto done;
  printf("\n");
  fprintf(stderr, "tokens %d  daemon pid %d  spawned %d\n", result.n_tokens, info.daemon_pid, info.daemon_spawned);
  rc = 0;
done:
  if (rc != 0) fprintf(stderr, "stream: %s\n", waste_last_error());
  waste_free(ids);
  waste_close(model);
  return rc;
}
