"""The PyTorch network of the ``seq2seq`` baselines (see :mod:`kbench_baselines.seq2seq`, "Network").

A module of its own because it imports torch at its top: :func:`kbench_baselines.seq2seq.net_class`
imports it on first use, so that importing :mod:`kbench_baselines.seq2seq` (and every baseline, which
``baselines`` imports) does not import torch. The leading underscore keeps it out of
:func:`kbench_baselines.base.discover`.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn


class Seq2SeqNet(nn.Module):
    """Embeddings -> optional Conv1D layers -> BiLSTM encoder; LSTM-cell decoder with additive attention."""

    def __init__(self, n_fields, n_tokens, n_numeric, out_sizes, field_dim=8, token_dim=16,
                 conv_channels=64, conv_layers=2, conv_kernel=3, enc_hidden=64, dec_hidden=128,
                 attn_dim=64, out_emb=16, dropout=0.1, use_conv=True):
        super().__init__()
        self.out_sizes = list(out_sizes)
        self.offsets = np.concatenate([[0], np.cumsum(self.out_sizes)]).astype(int).tolist()
        n_out = self.offsets[-1]
        self.bos = n_out
        self.field_emb = nn.Embedding(n_fields, field_dim)
        self.token_emb = nn.Embedding(n_tokens, token_dim)
        self.register_buffer("field_ids", torch.arange(n_fields), persistent=False)
        d = field_dim + token_dim + n_numeric
        self.use_conv = bool(use_conv)
        convs = []
        if self.use_conv:
            for _ in range(conv_layers):
                convs += [nn.Conv1d(d, conv_channels, conv_kernel, padding=conv_kernel // 2), nn.ReLU()]
                d = conv_channels
        self.conv = nn.Sequential(*convs)
        self.enc = nn.LSTM(d, enc_hidden, batch_first=True, bidirectional=True)
        self.drop = nn.Dropout(dropout)
        e2 = 2 * enc_hidden
        self.init_h = nn.Linear(e2, dec_hidden)
        self.init_c = nn.Linear(e2, dec_hidden)
        self.att_e = nn.Linear(e2, attn_dim, bias=False)
        self.att_h = nn.Linear(dec_hidden, attn_dim)
        self.att_v = nn.Linear(attn_dim, 1, bias=False)
        self.out_emb = nn.Embedding(n_out + 1, out_emb)
        self.cell = nn.LSTMCell(out_emb + e2, dec_hidden)
        self.out = nn.Linear(dec_hidden + e2 + out_emb, n_out)
        self.smoothing = 0.0  # label smoothing of the training loss (set by the trainer)

    def encode(self, tokens, numeric):
        b = tokens.shape[0]
        x = torch.cat([self.field_emb(self.field_ids).unsqueeze(0).expand(b, -1, -1),
                       self.token_emb(tokens), numeric], dim=2)
        if self.use_conv:
            x = self.conv(x.transpose(1, 2)).transpose(1, 2)
        enc, (h, c) = self.enc(x)
        enc = self.drop(enc)
        hcat = torch.cat([h[0], h[1]], dim=1)
        ccat = torch.cat([c[0], c[1]], dim=1)
        return enc, self.att_e(enc), torch.tanh(self.init_h(hcat)), self.init_c(ccat)

    def attention(self, keys, h):
        score = self.att_v(torch.tanh(keys + self.att_h(h).unsqueeze(1))).squeeze(2)
        return torch.softmax(score, dim=1)

    def step(self, enc, keys, h, c, prev_tok, t):
        """One decoder step: (log-probs over position t's values, h, c, attention weights)."""
        a = self.attention(keys, h)
        ctx = torch.bmm(a.unsqueeze(1), enc).squeeze(1)
        e = self.out_emb(prev_tok)
        h, c = self.cell(torch.cat([e, ctx], dim=1), (h, c))
        logits = self.out(torch.cat([h, ctx, e], dim=1))[:, self.offsets[t]:self.offsets[t + 1]]
        return torch.log_softmax(logits, dim=1), h, c, a

    def prev_token(self, value_idx, t):
        """Joint token of position t-1's value (BOS at t = 0)."""
        if t == 0:
            return torch.full((value_idx.shape[0],), self.bos, dtype=torch.long)
        return value_idx + self.offsets[t - 1]

    def forward(self, tokens, numeric, target):
        """Teacher-forced mean cross-entropy over steps and rows."""
        enc, keys, h, c = self.encode(tokens, numeric)
        loss = 0.0
        prev = self.prev_token(target[:, 0], 0)
        for t in range(len(self.out_sizes)):
            logp, h, c, _ = self.step(enc, keys, h, c, prev, t)
            nll = torch.nn.functional.nll_loss(logp, target[:, t])
            if self.smoothing:
                nll = (1 - self.smoothing) * nll - self.smoothing * logp.mean(dim=1).mean()
            loss = loss + nll
            prev = target[:, t] + self.offsets[t]
        return loss / len(self.out_sizes)
