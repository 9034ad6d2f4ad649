/*
 * The batch job of `tokenloom generate` (see batch_job.c).
 */
#ifndef TL_CLI_BATCH_JOB_H
#define TL_CLI_BATCH_JOB_H

#include <tokenloom.h>

// Runs every JSONL line of in_path ("-": stdin) through e, with `defaults` as the sampling
// and stop settings each line may override; writes one result line per input line to out_path
// ("-": stdout), in input order. progress: 1 on, 0 off, -1 when stderr is a terminal.
// Returns the exit code: 0 all lines ran, 1 an input or output problem or a bad line.
int tl_cli_batch_job(tl_engine *e, const struct tl_request *defaults, const char *in_path,
                     const char *out_path, int progress);

#endif
