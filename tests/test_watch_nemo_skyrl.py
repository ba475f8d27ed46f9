"""NeMo RL's log dir and SkyRL's eval dumps followed live by a real ``pilothouse watch`` into a real
agent, then imported with ``pilothouse import`` into a second agent: every point and row once, each
checked against what was written.  The dumps are written as each framework's own code writes them
(``support/rl_dumps.py`` cites it), the TensorBoard events by torch's SummaryWriter as theirs are; a
file that is not what its name says is refused, with a line saying so, and nothing of it stored."""

from __future__ import annotations

import json

import torch
from support.processes import AgentProcess
from support.rl_dumps import all_series, nemo_log_batched_dict_as_jsonl, skyrl_dump_per_dataset_eval_results
from support.runs import run_of
from support.sockets import free_port
from support.waiting import wait_until
from support.watch_proc import WatchProcess, import_paths, rows_by_step
from torch.utils.tensorboard import SummaryWriter

SYSTEM = "<|im_start|>system\nYou are a careful solver.<|im_end|>\n"


def _steps(client, name: str) -> list[int]:
    run = run_of(client, name)
    try:
        return sorted(rows_by_step(client, run["id"])) if run else []
    except Exception:  # the agent says a run with no rollouts yet has none: an AgentError
        return []


def _sorted(rows: dict[int, list[dict]]) -> dict[int, list[str]]:
    """Rows per step, each as its JSON text, sorted: the files of a step settle in any order."""
    return {step: sorted(json.dumps(r, sort_keys=True) for r in part) for step, part in rows.items()}


def _rows(client, run_id: str) -> dict[int, list[str]]:
    return _sorted(rows_by_step(client, run_id))


def _tb(series: dict) -> dict:
    """A run's series less the agent's derived rollouts/* ones."""
    return {k: v for k, v in series.items() if not k.startswith("rollouts/")}


def nemo_train_step(log_dir, step: int) -> list[dict]:
    """``grpo_train``'s ``log_data`` at ``step`` written by NeMo RL's logger; the rows it must make."""
    questions = [f"What is {step} + {g}?" for g in (1, 1, 2, 2)]  # GRPO: two prompts, two samples each
    answers = [f"{step + 1}", "I think 7", f"{step + 2}, since {step}+2", "no idea"]
    content = [[SYSTEM, f"<|im_start|>user\n{q}<|im_end|>\n", f"<|im_start|>assistant\n{a}<|im_end|>\n"]
               for q, a in zip(questions, answers)]
    rewards = torch.tensor([1.0, 0.0, 1.0, -0.5])
    prompt_len, response_len, width = 5, [2, 3, 4, 1], 10
    mask = torch.zeros(4, width)
    advantages = torch.zeros(4, width)
    for i, n in enumerate(response_len):
        mask[i, prompt_len:prompt_len + n] = 1
        advantages[i, prompt_len:prompt_len + n] = (0.5, -0.5, 0.75, -0.75)[i]  # GRPO's, broadcast
    advantages[2, prompt_len:prompt_len + 4] = torch.tensor([0.25, 0.5, 0.75, 1.0])  # one that varies: its mean
    logprobs = -torch.arange(40, dtype=torch.float32).reshape(4, width) / 64
    log_data = {"content": content, "rewards": rewards.tolist(),
                "input_lengths": (prompt_len + torch.tensor(response_len)).tolist(),
                "token_ids": torch.arange(40).reshape(4, width).tolist(), "token_loss_mask": mask.tolist(),
                "sample_loss_mask": [1.0, 1.0, 1.0, 0.0], "advantages": advantages.tolist(),
                "generation_logprobs": logprobs.tolist(), "prev_logprobs": logprobs.tolist()}
    nemo_log_batched_dict_as_jsonl(log_dir, log_data, f"train_data_step{step}.jsonl")
    adv = [0.5, -0.5, 0.625, -0.75]
    return [{"prompt": SYSTEM + f"<|im_start|>user\n{questions[i]}<|im_end|>\n",
             "completion": f"<|im_start|>assistant\n{answers[i]}<|im_end|>\n", "reward": rewards[i].item(),
             "advantage": adv[i], "completion_tokens": response_len[i], "input_lengths": prompt_len + response_len[i],
             "sample_loss_mask": log_data["sample_loss_mask"][i], "idx": i} for i in range(4)]


def nemo_val_step(log_dir, step: int) -> list[dict]:
    """``validate``'s ``val_log_data``: chats (one of several turns, an environment's answer between)."""
    chats = [[{"role": "system", "content": "Solve it."}, {"role": "user", "content": f"{step} * 3 = ?"},
              {"role": "assistant", "content": f"{step * 3}"}],
             [{"role": "user", "content": "Spell 'cat' backwards."}, {"role": "assistant", "content": "tca"},
              {"role": "environment", "content": "Wrong: try again."}, {"role": "assistant", "content": "tac"}]]
    rewards = [1.0, 0.5]
    nemo_log_batched_dict_as_jsonl(log_dir, {"content": chats, "rewards": rewards}, f"val_data_step{step}.jsonl")
    return [{"prompt": chats[0][:2], "completion": chats[0][2:], "reward": 1.0, "split": "val", "idx": 0},
            {"prompt": chats[1][:1], "completion": chats[1][1:], "reward": 0.5, "split": "val", "idx": 1}]


def test_nemo_rl_log_dir_watched_then_imported(agent_proc, tmp_path):
    logs = tmp_path / "logs"
    log_dir = logs / "exp_001"  # examples/run_grpo_math.py: get_next_experiment_dir("logs")
    board = SummaryWriter(str(log_dir / "tensorboard"))  # the Logger makes it first, before any step dump
    board.add_scalar("timing/setup/total_setup_time_s", 2.5, 0)
    board.flush()
    second = AgentProcess(tmp_path / "agent2", free_port())
    watcher = WatchProcess(tmp_path, agent_proc.url, logs, project="nemo").start()
    client = agent_proc.client()
    bad = log_dir / "train_data_step3.jsonl"
    try:
        second.start()
        want = {0: nemo_val_step(log_dir, 0)}
        board.add_scalar("validation/accuracy", 0.5, 0)
        for step in (1, 2):
            want[step] = nemo_train_step(log_dir, step)
            board.add_scalar("train/reward", step / 4, step)
        want[2] += nemo_val_step(log_dir, 2)
        board.add_scalar("validation/accuracy", 0.75, 2)
        board.flush()
        bad.write_text('{"content": "hello", "rewards": 1.0}\n')  # by its name NeMo RL's, by its lines not
        wait_until(lambda: _steps(client, "exp_001") == [0, 1, 2], timeout=30, what="steps 0-2, once settled")
        wait_until(lambda: f"{bad} is not" in watcher.log.read_text(), timeout=10, what="the refusal")
        watcher.stop()
        assert f"exp_001: {bad} is not a NeMo RL step data file (line 1: its content is not a one-element list, " \
               "as NeMo RL writes each value): left out" in watcher.log.read_text()
        # its tensorboard/ is the run's, not a run of its own
        assert [r["name"] for r in client.runs() if r["kind"] == "watched"] == ["exp_001"]
        run_id = run_of(client, "exp_001")["id"]
        assert _rows(client, run_id) == _sorted(want)
        series = all_series(client, run_id)
        assert _tb(series) == {"timing/setup/total_setup_time_s": ([0], [2.5]), "train/reward": ([1, 2], [0.25, 0.5]),
                               "validation/accuracy": ([0, 2], [0.5, 0.75])}

        imported = import_paths(tmp_path, second.url, logs, project="nemo")
        assert imported.returncode == 1 and f"{bad} is not a NeMo RL step data file" in imported.stderr
        client2 = second.client()
        assert _rows(client2, run_id) == _sorted(want) and _tb(all_series(client2, run_id)) == _tb(series)
        assert all_series(client2, run_id)["rollouts/reward/mean"] == ([1, 2], [0.375, 0.375])  # validation's not in
    finally:
        watcher.stop()
        board.close()
        second.stop()


def skyrl_eval(export, step: int, sources: list, scores: list) -> list[dict]:
    """An eval at ``step`` dumped by SkyRL's own function; the rows it must make, per file's order."""
    folder = export / "dumped_evals" / f"global_step_{step}_evals"  # skyrl/train/evaluate.py
    folder.mkdir(parents=True)
    n = len(sources)
    prompts = [f"<|im_start|>user\nWhat is {step} + {i}?<|im_end|>\n<|im_start|>assistant\n" for i in range(n)]
    responses = [f"<think>\nadd them\n</think>\n{step + i}<|im_end|>" for i in range(n)]
    extras = [{"reward_spec": {"method": "rule", "ground_truth": str(step + i)}} for i in range(n)]
    skyrl_dump_per_dataset_eval_results(folder, prompts, responses, {"rewards": scores, "stop_reasons": ["stop"] * n},
                                        sources, ["gsm8k"] * n, extras, {"eval/all/avg_score": 0.5})
    rows = []
    for source in dict.fromkeys(s or "unknown" for s in sources):  # a file per data source, in first-seen order
        for i in (i for i in range(n) if (sources[i] or "unknown") == source):
            token_level = isinstance(scores[i], list)
            rows.append({"prompt": prompts[i], "completion": responses[i],
                         "reward": float(sum(scores[i]) if token_level else scores[i]), "split": "eval",
                         **({"score": str(scores[i])} if token_level else {}), "stop_reason": "stop",
                         "env_class": "gsm8k", "env_extras": '{"reward_spec": {"ground_truth": "%d", "method": "rule"}}'
                         % (step + i), "data_source": source})
    return rows


def test_skyrl_eval_dumps_watched_then_imported(agent_proc, tmp_path):
    export, board_dir = tmp_path / "exports", tmp_path / "tensorboard_log" / "skyrl" / "gsm8k"
    want = {0: skyrl_eval(export, 0, ["openai/gsm8k", None, "openai/gsm8k"], [1.0, [0.0, 0.0, 1.0], 0.0])}
    board = SummaryWriter(str(board_dir))  # SkyRL's Tracking: $TENSORBOARD_DIR or tensorboard_log/{project}/{name}
    board.add_scalar("eval/all/avg_score", 0.5, 0)
    board.flush()
    second = AgentProcess(tmp_path / "agent2", free_port())
    watcher = WatchProcess(tmp_path, agent_proc.url, "--run", "gsm8k", export, board_dir, project="skyrl").start()
    client = agent_proc.client()
    bad = export / "dumped_evals" / "global_step_5_evals" / "openai_gsm8k.jsonl"  # another tool's, by its place SkyRL's
    try:
        second.start()
        wait_until(lambda: _steps(client, "gsm8k") == [0], timeout=30, what="step 0's eval")
        want[3] = skyrl_eval(export, 3, ["openai/gsm8k", "openai/gsm8k"], [0.25, 1.0])
        board.add_scalar("eval/all/avg_score", 0.625, 3)
        board.flush()
        bad.parent.mkdir()
        bad.write_text('{"prompt": "2+2", "response": "4", "score": 1.0}\n')
        wait_until(lambda: _steps(client, "gsm8k") == [0, 3], timeout=30, what="step 3's eval, once settled")
        wait_until(lambda: f"{bad} is not" in watcher.log.read_text(), timeout=10, what="the refusal")
        watcher.stop()
        assert f"gsm8k: {bad} is not a SkyRL eval dump file (line 1 has no input_prompt and output_response): " \
               "left out" in watcher.log.read_text()
        run_id = run_of(client, "gsm8k")["id"]
        assert rows_by_step(client, run_id) == want  # aggregated_results.jsonl is not rows
        series = all_series(client, run_id)
        assert series == {"eval/all/avg_score": ([0, 3], [0.5, 0.625])}  # nor scalars; eval rows make no rollouts/*

        imported = import_paths(tmp_path, second.url, export, project="skyrl")  # a bare export_path is one run
        assert imported.returncode == 1 and f"{bad} is not a SkyRL eval dump file" in imported.stderr
        client2 = second.client()
        assert [r["name"] for r in client2.runs() if r["kind"] == "watched"] == ["exports"]
        assert rows_by_step(client2, run_of(client2, "exports")["id"]) == want
    finally:
        watcher.stop()
        board.close()
        second.stop()
