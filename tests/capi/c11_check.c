/* waste.h from C11 (-std=c11 -pedantic -Werror): the header is plain C, and the calls that need
 * no model behave: version, status names, and the exact error for a container that is not there. */
#include <stdio.h>
#include <string.h>

#include "waste.h"

static int expect_str(const char *what, const char *got, const char *want) {
  if (strcmp(got, want) == 0) return 0;
  fprintf(stderr, "%s: got \"%s\", want \"%s\"\n", what, got, want);
  return 1;
}

int main(void) {
  int bad = 0;
  waste_open_options options;
  waste_model *model = NULL;
  waste_status status;
  bad += expect_str("waste_status_name", waste_status_name(WASTE_ERR_IO), "io");
  if (strlen(waste_version()) < 5) {
    fprintf(stderr, "waste_version: \"%s\" is not MAJOR.MINOR.PATCH\n", waste_version());
    ++bad;
  }
  waste_open_options_init(&options);
  options.mode = WASTE_OPEN_IN_PROCESS;
  status = waste_open("/nonexistent/c11.waste", &options, &model);
  if (status == WASTE_OK || model != NULL) {
    fprintf(stderr, "waste_open of a missing path succeeded\n");
    return 1;
  }
  bad += expect_str("waste_status_name(open)", waste_status_name(status), "format");
  if (strstr(waste_last_error(), "/nonexistent/c11.waste") == NULL) {
    fprintf(stderr, "waste_last_error does not name the path: \"%s\"\n", waste_last_error());
    ++bad;
  }
  waste_close(NULL);
  waste_free(NULL);
  return bad == 0 ? 0 : 1;
}
