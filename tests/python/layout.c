/*
 * Prints the size of every public struct the Python binding mirrors and the offset of every
 * field, one "struct.field offset" line each (python/tokenloom/_lib.py is checked against them
 * by test_layout.py; the output at a release is kept as tests/python/abi_<version>.txt, which
 * later headers must stay compatible with). Compiled at test time against include/tokenloom.h.
 */
#include <tokenloom.h>

#include <stddef.h>
#include <stdio.h>

#define F(s, f) printf(#s "." #f " %zu\n", offsetof(struct s, f))
#define SZ(s) printf(#s " %zu\n", sizeof(struct s))

int main(void)
{
    printf("TL_ABI_SLACK %d\n", TL_ABI_SLACK);
    SZ(tl_model_params);
    F(tl_model_params, tokenizer_path);
    SZ(tl_model_info);
    F(tl_model_info, arch), F(tl_model_info, name), F(tl_model_info, path);
    F(tl_model_info, n_params), F(tl_model_info, n_vocab), F(tl_model_info, n_ctx_train);
    F(tl_model_info, n_embd), F(tl_model_info, n_layer), F(tl_model_info, n_head);
    F(tl_model_info, n_head_kv), F(tl_model_info, n_ff), F(tl_model_info, head_dim);
    F(tl_model_info, weight_type), F(tl_model_info, chat_template);
    F(tl_model_info, bos), F(tl_model_info, eos), F(tl_model_info, eot);
    SZ(tl_engine_config);
    F(tl_engine_config, max_batch_size), F(tl_engine_config, max_tokens_per_step);
    F(tl_engine_config, max_seq_len), F(tl_engine_config, kv_block_size);
    F(tl_engine_config, kv_blocks), F(tl_engine_config, kv_bytes), F(tl_engine_config, kv_type);
    F(tl_engine_config, prefix_caching), F(tl_engine_config, n_threads);
    F(tl_engine_config, max_waiting), F(tl_engine_config, max_prefill_tokens_decoding);
    F(tl_engine_config, prefill_backlog_tokens), F(tl_engine_config, prefill_tokens_per_decode);
    F(tl_engine_config, device);
    SZ(tl_sampling);
    F(tl_sampling, temperature), F(tl_sampling, top_k), F(tl_sampling, top_p);
    F(tl_sampling, min_p), F(tl_sampling, repetition_penalty), F(tl_sampling, presence_penalty);
    F(tl_sampling, frequency_penalty), F(tl_sampling, seed), F(tl_sampling, n_logprobs);
    F(tl_sampling, logit_bias), F(tl_sampling, n_logit_bias);
    SZ(tl_logit_bias);
    F(tl_logit_bias, token), F(tl_logit_bias, bias);
    SZ(tl_token_logprob);
    F(tl_token_logprob, id), F(tl_token_logprob, logprob);
    SZ(tl_event);
    F(tl_event, type), F(tl_event, request_id), F(tl_event, text), F(tl_event, text_len);
    F(tl_event, token), F(tl_event, logprob), F(tl_event, top), F(tl_event, n_top);
    F(tl_event, finish), F(tl_event, n_prompt_tokens), F(tl_event, n_cached_tokens);
    F(tl_event, n_generated), F(tl_event, n_preempted), F(tl_event, queue_us);
    F(tl_event, ttft_us), F(tl_event, total_us), F(tl_event, error), F(tl_event, prompt_pos);
    SZ(tl_request);
    F(tl_request, prompt), F(tl_request, prompt_len), F(tl_request, prompt_tokens);
    F(tl_request, n_prompt_tokens), F(tl_request, add_special), F(tl_request, parse_special);
    F(tl_request, sampling), F(tl_request, max_tokens), F(tl_request, stop_tokens);
    F(tl_request, n_stop_tokens), F(tl_request, stop), F(tl_request, n_stop);
    F(tl_request, ignore_eos), F(tl_request, priority), F(tl_request, timeout_ms);
    F(tl_request, prompt_logprobs), F(tl_request, render_special), F(tl_request, grammar);
    F(tl_request, on_event), F(tl_request, user);
    SZ(tl_engine_stats);
    F(tl_engine_stats, n_running), F(tl_engine_stats, n_waiting);
    F(tl_engine_stats, kv_blocks_total), F(tl_engine_stats, kv_blocks_free);
    F(tl_engine_stats, kv_blocks_used), F(tl_engine_stats, kv_blocks_cached);
    F(tl_engine_stats, kv_block_size), F(tl_engine_stats, prompt_tokens_total);
    F(tl_engine_stats, generation_tokens_total), F(tl_engine_stats, steps_total);
    F(tl_engine_stats, preemptions_total), F(tl_engine_stats, prefix_queries_total);
    F(tl_engine_stats, prefix_hits_total), F(tl_engine_stats, finished_total);
    F(tl_engine_stats, step_hist_le), F(tl_engine_stats, step_hist_count);
    F(tl_engine_stats, step_tokens_sum), F(tl_engine_stats, step_us_total);
    F(tl_engine_stats, forward_us_total), F(tl_engine_stats, int8_ops_total);
    F(tl_engine_stats, flops_total), F(tl_engine_stats, weight_bytes_total);
    F(tl_engine_stats, kv_bytes_total), F(tl_engine_stats, seqs_hist_count);
    F(tl_engine_stats, seqs_sum), F(tl_engine_stats, decode_hist_count);
    F(tl_engine_stats, decode_tokens_sum), F(tl_engine_stats, prefill_hist_count);
    F(tl_engine_stats, prefill_tokens_sum);
    F(tl_engine_stats, gpu_submits_total), F(tl_engine_stats, gpu_waits_total);
    F(tl_engine_stats, gpu_dispatches_total), F(tl_engine_stats, gpu_upload_bytes_total);
    F(tl_engine_stats, gpu_download_bytes_total), F(tl_engine_stats, gpu_busy_ns_total);
    F(tl_engine_stats, gpu_phase_ns_total), F(tl_engine_stats, gpu_weight_bytes);
    F(tl_engine_stats, gpu_kv_bytes);
    return 0;
}
