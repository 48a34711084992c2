"""The numbers the paper reports, for putting ours beside them.

Kwon et al., "Efficient Memory Management for Large Language Model Serving
with PagedAttention", SOSP 2023. All are for OPT-13B on one A100-40GB
(Table 1: 15.7K KV slots) unless noted. These are *reference values to
compare against*; nothing in the simulator reads them.
"""

from __future__ import annotations

#: Table 1: KV cache slots per model setup.
TABLE1_KV_SLOTS = {"OPT-13B": 15_700, "OPT-66B": 9_700, "OPT-175B": 60_100}

#: Fig. 11: mean prompt and output lengths of the datasets.
FIG11_MEANS = {"sharegpt": (161.31, 337.99), "alpaca": (19.31, 58.45)}

#: Fig. 2: average share of KV memory per use, ShareGPT (the §6.2 experiment), in %.
FIG2_BREAKDOWN = {
    "Orca (Max)": {"token_states": 20.4, "reservation": 13.3, "internal_fragmentation": 57.3,
                   "external_fragmentation": 8.9},
    "Orca (Pow2)": {"token_states": 26.8, "reservation": 17.9, "internal_fragmentation": 13.6,
                    "external_fragmentation": 41.6},
    "Orca (Oracle)": {"token_states": 38.2, "reservation": 25.2, "internal_fragmentation": 0.0,
                      "external_fragmentation": 36.6},
    "vLLM": {"token_states": 96.3, "reservation": 0.0, "internal_fragmentation": 3.7,
             "external_fragmentation": 0.0},
}

#: Fig. 13: average number of batched requests (ShareGPT at 2 req/s, Alpaca at 30 req/s:
#: `pagedkit.sim.experiments.PAPER_RATES`).
FIG13_BATCH = {
    "sharegpt": {"Orca (Max)": 7.00, "Orca (Pow2)": 9.81, "Orca (Oracle)": 13.62, "vLLM": 30.42},
    "alpaca": {"Orca (Max)": 7.00, "Orca (Pow2)": 43.24, "Orca (Oracle)": 72.75,
               "vLLM": 132.44},
}

#: Fig. 12 / §6.2: how much higher a request rate vLLM sustains than each baseline,
#: on ShareGPT only (a range over the three models of Fig. 12's first row: "On the
#: ShareGPT dataset, vLLM can sustain 1.7x-2.7x higher request rates compared to Orca
#: (Oracle) and 2.7x-8x compared to Orca (Max)"). For Alpaca (the second row) the paper
#: states no number, only "a similar trend" (less for OPT-175B, Fig. 12f).
FIG12_RATE_GAIN = {"Orca (Oracle)": (1.7, 2.7), "Orca (Max)": (2.7, 8.0)}
#: The one trace `FIG12_RATE_GAIN` was measured on.
FIG12_RATE_GAIN_DATASET = "sharegpt"

#: Fig. 15: memory saved by sharing, Alpaca, in % (parallel sampling n, beam width k).
FIG15_SAVING = {"parallel": {2: 6.09, 4: 8.53, 6: 9.79},
                "beam": {2: 37.56, 4: 53.13, 6: 55.16}}

#: Fig. 18b / §7.2: the block sizes that performed best.
FIG18B_BEST_BLOCK_SIZES = {"sharegpt": (16, 128), "alpaca": (16, 32)}
