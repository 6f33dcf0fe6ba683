"""Make the tiny random Llama and its tokenizer, offline, from a fixed seed: run with the vllm
engine's own interpreter (``python tiny_llama.py FOLDER SEED``), which has torch, tokenizers and
transformers; nothing of pytest-wedge is imported. A byte-level BPE tokenizer is trained on
generated text, and a 2-layer Llama (hidden 256) is initialised from the seed: about 3 MB."""

import random
import sys
from pathlib import Path

WORDS = [
    "the",
    "router",
    "prefill",
    "decode",
    "kv",
    "cache",
    "token",
    "request",
    "wedge",
    "stream",
    "queue",
    "worker",
    "engine",
    "transfer",
    "block",
    "batch",
    "health",
    "agent",
    "tool",
    "call",
    "round",
    "answer",
    "wait",
]

CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] or '' }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


def build(out: Path, seed: int) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    rng = random.Random(seed)
    lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 16))) for _ in range(3000)]
    bpe = Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1000,
        special_tokens=["<s>", "</s>", "<unk>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    bpe.train_from_iterator(lines, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="</s>"
    )
    # Chat requests need a template (the harness's tool-call rounds: assistant turns may have
    # no content).
    tokenizer.chat_template = CHAT_TEMPLATE
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(out)
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=2048,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        torch_dtype="bfloat16",
    )
    LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(out)


if __name__ == "__main__":
    build(Path(sys.argv[1]), int(sys.argv[2]))
