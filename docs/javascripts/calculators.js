// Calculators page: memory per GPU, DDP step time, throughput and MFU, launch commands.
// Plain JavaScript: no server, no request, no library. Labels follow <html lang>.
// The models are the ones the guide's chapters state; tests/test_calculators.py checks them.
(() => {
  "use strict";

  const TEXT = {
    en: {
      params: "Parameters (Ψ)",
      paramsHint: "e.g. 7B, 1.5e9, 33672",
      precision: "Precision",
      fp32: "fp32",
      amp: "bf16 autocast, fp32 master weights",
      bf16: "pure bf16 (weights, gradients and optimizer state)",
      optimizer: "Optimizer",
      sgd: "SGD",
      momentum: "SGD with momentum",
      adam: "Adam / AdamW",
      layout: "Data parallelism",
      ddp: "DDP (full replica)",
      fsdpTrue: "FSDP2, reshard_after_forward=True",
      fsdpFalse: "FSDP2, reshard_after_forward=False",
      dp: "Data-parallel size (DP)",
      tp: "Tensor-parallel size (TP)",
      pp: "Pipeline-parallel size (PP)",
      unit: "Parameters of the largest FSDP unit",
      unitHint: "e.g. one transformer block: 202M in Llama 2 7B",
      batch: "Micro-batch per GPU (sequences)",
      seq: "Sequence length (tokens)",
      hidden: "Hidden size (d)",
      layers: "Transformer blocks (L)",
      heads: "Attention heads (h)",
      vocab: "Vocabulary (V)",
      ac: "Activation checkpointing",
      acNone: "none",
      acFull: "every block (use_reentrant=False)",
      dropout: "Dropout in the blocks (GPT-2 style)",
      activations: "Activations saved for backward",
      recompute: "One block recomputed in backward (transient)",
      copies: "autocast's bf16 copies of the weights",
      backwardBuffers: "Backward: unsharded gradients + reduce-scatter buffer",
      actBlock: "per block",
      actTop: "last norm, head, loss",
      actInputs: "block inputs only",
      actTp: "÷ TP (sequence parallelism assumed)",
      copiesNote: "≈ Ψ × 2 B: one per matmul weight, kept from forward to backward",
      gradBuffersNote: "1 unit each, while it is reduced",
      bucketView: "DDP with gradient_as_bucket_view=True",
      item: "",
      formula: "formula",
      perGpu: "per GPU",
      weights: "Weights",
      grads: "Gradients",
      optState: "Optimizer state",
      states: "Training state (sum)",
      gathered: "All-gathered parameters (transient)",
      buckets: "DDP gradient buckets",
      peak: "Sum: an upper bound on the peak",
      gpus: "GPUs",
      perParam: "Bytes per parameter before splitting",
      twoUnits: "2 units: the one computing and the next, prefetched",
      allUnits: "every unit, kept from forward to backward",
      bucketViews: "0: the gradients are views into the buckets",
      zero: "ZeRO §3.1 counts 2 + 2 + 12 = 16 B for mixed-precision Adam",
      notCounted: "Not counted: the CUDA context, NCCL's buffers, the allocator's fragmentation, temporaries inside one operation.",
      invalid: "Check the inputs: ",
      grad: "Gradient size (MiB)",
      gradHint: "parameters × 4 B for fp32 gradients",
      bucket: "Bucket cap, bucket_cap_mb (MiB)",
      first: "First bucket cap (MiB)",
      firstHint: "1 MiB while bucket_cap_mb is left at its default",
      embed: "Largest parameter of the first layers (MiB)",
      embedHint: "reduced last: e.g. the token embedding, V × d × 4 B; 0 if small",
      backward: "Backward's share of the compute time (%)",
      backwardHint: "only the backward pass can hide the all-reduce; about 2/3 of forward + backward",
      link: "Link",
      custom: "your own figure",
      rate: "Link rate per direction (GB/s)",
      eff: "busbw as a share of the link rate (%)",
      effHint: "80% as on the performance page; 100% for a measured busbw",
      alpha: "All-reduce latency α per bucket (µs)",
      alphaHint: "the fixed cost of one all-reduce, whatever its size; fit it to your all-reduce sweep as the performance page does; 0 leaves latency out",
      world: "GPUs (world size n)",
      compute: "Compute time per step (ms)",
      computeHint: "measured at this per-GPU batch, all GPUs busy, with DDP's noop_hook in place of the all-reduce",
      busbw: "busbw",
      bucketList: "Buckets",
      comm: "All-reduce per step",
      last: "Last bucket (the first layers)",
      noOverlap: "Step, no overlap",
      overlap: "Step, overlapped with backward (best case)",
      speedup: "Speed-up over one GPU",
      efficiency: "Scaling efficiency",
      noOvShort: "no overlap",
      ovShort: "overlap",
      value: "value",
      fCompute: "compute",
      fStep: "step",
      fLast: "last",
      fForward: "forward + optimizer",
      fBackward: "backward",
      fChain: "end of the last all-reduce (each starts once backward has made its bucket and the previous one is done)",
      bucketRule: (first, cap) => `first ≤ ${first} MiB, then ≤ ${cap} MiB each`,
      lastRule: (embed) => `the last one also holds the first layers' ${embed} MiB`,
      problems: {
        empty: () => "Required.",
        number: (r) => `Not a number: digits, with k, M, B or T if you like${r.unit ? `, and ${r.unit}` : ""}; e.g. ${r.example}.`,
        unit: (r) => (r.unit ? `Only ${r.unit} here, e.g. ${r.example}.` : `A number without a unit, e.g. ${r.example}.`),
        negative: () => "Must not be negative.",
        integer: (r) => `A whole number, e.g. ${r.example}.`,
        min: (r) => (r.above !== undefined ? `Must be more than ${r.above}.` : `At least ${r.min}.`),
        max: (r) => `At most ${r.max.toLocaleString("en")}${r.unit ? ` ${r.unit}` : ""}.`,
        buckets: (n) => `That makes ${n.toLocaleString("en")} buckets, more than 100,000: raise the cap.`,
        embedTooBig: () => "Larger than the whole gradient.",
      },
      tputParams: "Matmul parameters (N)",
      tputParamsHint: "all parameters but the embedding (count it if tied to the output layer); Llama 3.1 8B: 7.5B",
      tputLayers: "Transformer blocks (L)",
      tputHidden: "Hidden size (d)",
      tputSeq: "Sequence length (s, tokens)",
      tputVocab: "Vocabulary (V)",
      tputVocabHint: "the output layer, V × d, is not recomputed by checkpointing",
      tputTokens: "Tokens per step, all GPUs",
      tputTokensHint: "global batch: sequences × sequence length",
      tputStep: "Measured step time (s)",
      tputStepHint: "averaged over many steps after the first few",
      tputGpus: "GPUs (n)",
      tputGpu: "GPU (bf16 dense peak)",
      tputPeak: "Peak per GPU (TFLOP/s)",
      tputPeakHint: "the datasheet's dense figure for the dtype of the matmuls, without sparsity",
      tputAc: "Activation checkpointing",
      tputAcNone: "none",
      tputAcFull: "every block",
      tputTps: "Tokens per second per GPU",
      tputModel: "Model FLOPs per token",
      tputHardware: "Hardware FLOPs per token",
      tputAchieved: "Model TFLOP/s per GPU",
      tputMfu: "MFU",
      tputHfu: "HFU",
      tputAttnAgain: "attention's backward recomputes the scores",
      tputBlocksAgain: "the blocks' forward again",
      nodes: "Nodes",
      gpn: "GPUs per node",
      launcher: "Launcher",
      torchrun: "torchrun on each node",
      slurmTorchrun: "Slurm: srun torchrun",
      slurmPython: "Slurm: srun python (no torchrun)",
      k8s: "Kubernetes (Indexed Job)",
      script: "Training script",
      noteSingle: "Run it on the node. --standalone runs the rendezvous store on a free port of this node.",
      noteNodes: "Run the same command on every node, with HEAD_NODE and JOB_ID set (see the comment).",
      noteSlurmTorchrun: "Save it as a file and submit it with sbatch. For 2 nodes of 8 GPUs it is snippets/launch/slurm_train.sbatch.",
      noteSlurmPython:
        "Save it as a file and submit it with sbatch. The program maps SLURM_* to RANK, LOCAL_RANK, ... itself, like env_from_slurm() in env_vars.py. For 2 nodes of 8 GPUs it is snippets/launch/slurm_srun.sbatch.",
      noteK8s:
        "The command of every pod of an Indexed Job named ddp, one pod per node, with a headless Service named ddp as the pods' subdomain. For 2 nodes of 4 GPUs it is the command in snippets/launch/k8s_ddp.yaml, which has the Job and the Service.",
    },
    ko: {
      params: "파라미터 수(Ψ)",
      paramsHint: "예: 7B, 1.5e9, 33672",
      precision: "정밀도",
      fp32: "fp32",
      amp: "bf16 autocast, fp32 마스터 가중치",
      bf16: "순수 bf16(가중치·기울기·옵티마이저 상태 모두)",
      optimizer: "옵티마이저",
      sgd: "SGD",
      momentum: "SGD + 모멘텀",
      adam: "Adam / AdamW",
      layout: "데이터 병렬 방식",
      ddp: "DDP(전체 복제)",
      fsdpTrue: "FSDP2, reshard_after_forward=True",
      fsdpFalse: "FSDP2, reshard_after_forward=False",
      dp: "데이터 병렬 크기(DP)",
      tp: "텐서 병렬 크기(TP)",
      pp: "파이프라인 병렬 크기(PP)",
      unit: "가장 큰 FSDP 단위의 파라미터 수",
      unitHint: "예: 트랜스포머 블록 하나, Llama 2 7B에서 202M",
      batch: "GPU당 마이크로배치(시퀀스 수)",
      seq: "시퀀스 길이(토큰)",
      hidden: "은닉 크기(d)",
      layers: "트랜스포머 블록 수(L)",
      heads: "어텐션 헤드 수(h)",
      vocab: "어휘 크기(V)",
      ac: "활성값 체크포인팅",
      acNone: "안 함",
      acFull: "모든 블록(use_reentrant=False)",
      dropout: "블록 안의 드롭아웃(GPT-2 방식)",
      activations: "역전파용으로 저장되는 활성값",
      recompute: "역전파 중 다시 계산하는 블록 하나(일시적)",
      copies: "autocast가 만드는 가중치의 bf16 사본",
      backwardBuffers: "역전파: 샤딩 전 기울기 + reduce-scatter 버퍼",
      actBlock: "블록마다",
      actTop: "마지막 정규화, 헤드, 손실",
      actInputs: "블록 입력만",
      actTp: "÷ TP(시퀀스 병렬화를 쓴다고 가정)",
      copiesNote: "≈ Ψ × 2 B: 행렬곱 가중치마다 하나, 순전파부터 역전파까지 유지",
      gradBuffersNote: "리듀스하는 동안 각각 단위 1개",
      bucketView: "DDP에 gradient_as_bucket_view=True 지정",
      item: "",
      formula: "식",
      perGpu: "GPU당",
      weights: "가중치",
      grads: "기울기",
      optState: "옵티마이저 상태",
      states: "학습 상태 합계",
      gathered: "all-gather한 파라미터(일시적)",
      buckets: "DDP 기울기 버킷",
      peak: "합계: 최댓값의 상한",
      gpus: "GPU 수",
      perParam: "나누기 전 파라미터당 바이트",
      twoUnits: "단위 2개: 계산 중인 것과 미리 모아 두는 다음 것",
      allUnits: "모든 단위, 순전파부터 역전파까지 유지",
      bucketViews: "0: 기울기가 버킷의 뷰(view)",
      zero: "ZeRO 3.1절은 혼합 정밀도 Adam을 2 + 2 + 12 = 16 B로 셉니다",
      notCounted: "빠진 것: CUDA 컨텍스트, NCCL 버퍼, 메모리 할당자의 단편화, 연산 하나 안의 임시 텐서.",
      invalid: "입력을 확인하세요: ",
      grad: "기울기 크기(MiB)",
      gradHint: "fp32 기울기라면 파라미터 수 × 4 B",
      bucket: "버킷 상한 bucket_cap_mb(MiB)",
      first: "첫 버킷 상한(MiB)",
      firstHint: "bucket_cap_mb를 기본값으로 두면 1 MiB",
      embed: "첫 층들의 가장 큰 파라미터(MiB)",
      embedHint: "가장 나중에 리듀스됨: 예컨대 토큰 임베딩 V × d × 4 B, 작으면 0",
      backward: "계산 시간 중 역전파 비율(%)",
      backwardHint: "올리듀스를 숨길 수 있는 것은 역전파뿐입니다. 순전파 + 역전파의 약 2/3",
      link: "연결",
      custom: "직접 입력",
      rate: "방향당 링크 속도(GB/s)",
      eff: "링크 속도 대비 busbw(%)",
      effHint: "성능 비교 페이지처럼 80%, 직접 잰 busbw라면 100%",
      alpha: "버킷당 올리듀스 지연 α(µs)",
      alphaHint: "메시지 크기와 상관없이 올리듀스 한 번마다 드는 고정 비용입니다. 성능 비교 페이지처럼 직접 잰 올리듀스 시간에 직선을 맞춰 구하세요. 0이면 지연을 빼고 계산합니다",
      world: "GPU 수(월드 크기 n)",
      compute: "스텝당 계산 시간(ms)",
      computeHint: "실제로 쓸 GPU당 배치로, 모든 GPU가 함께 돌 때 잰 값(올리듀스 대신 DDP의 noop_hook을 건 스텝)",
      busbw: "busbw",
      bucketList: "버킷",
      comm: "스텝당 올리듀스",
      last: "마지막 버킷(첫 층들)",
      noOverlap: "스텝, 겹침 없음",
      overlap: "스텝, 역전파와 겹칠 때(최선)",
      speedup: "GPU 1개 대비 속도 향상",
      efficiency: "확장 효율",
      noOvShort: "겹침 없음",
      ovShort: "겹침",
      value: "값",
      fCompute: "계산",
      fStep: "스텝",
      fLast: "마지막",
      fForward: "순전파 + 옵티마이저",
      fBackward: "역전파",
      fChain: "마지막 올리듀스가 끝나는 시각(각 올리듀스는 역전파가 그 버킷을 채우고 앞 올리듀스가 끝나야 시작)",
      bucketRule: (first, cap) => `첫 버킷 ≤ ${first} MiB, 나머지 각각 ≤ ${cap} MiB`,
      lastRule: (embed) => `마지막 버킷에는 첫 층들의 ${embed} MiB도 들어감`,
      problems: {
        empty: () => "값을 넣으세요.",
        number: (r) => `숫자가 아닙니다. 숫자에 k, M, B, T를 붙여도 됩니다${r.unit ? `(단위 ${r.unit}도 가능)` : ""}. 예: ${r.example}`,
        unit: (r) => (r.unit ? `여기에는 ${r.unit}만 씁니다. 예: ${r.example}` : `단위 없이 숫자만 씁니다. 예: ${r.example}`),
        negative: () => "음수는 안 됩니다.",
        integer: (r) => `정수를 넣으세요. 예: ${r.example}`,
        min: (r) => (r.above !== undefined ? `${r.above}보다 커야 합니다.` : `${r.min} 이상이어야 합니다.`),
        max: (r) => `${r.max.toLocaleString("ko")}${r.unit ? ` ${r.unit}` : ""} 이하여야 합니다.`,
        buckets: (n) => `버킷이 ${n.toLocaleString("ko")}개로 100,000개를 넘습니다. 상한을 올리세요.`,
        embedTooBig: () => "기울기 전체보다 큽니다.",
      },
      tputParams: "행렬곱 파라미터 수(N)",
      tputParamsHint: "임베딩을 뺀 모든 파라미터(출력층과 가중치를 공유하면 포함), Llama 3.1 8B라면 7.5B",
      tputLayers: "트랜스포머 블록 수(L)",
      tputHidden: "은닉 크기(d)",
      tputSeq: "시퀀스 길이(s, 토큰)",
      tputVocab: "어휘 크기(V)",
      tputVocabHint: "출력층(V × d)은 체크포인팅해도 다시 계산하지 않습니다",
      tputTokens: "스텝당 토큰 수(모든 GPU 합)",
      tputTokensHint: "전역 배치: 시퀀스 수 × 시퀀스 길이",
      tputStep: "잰 스텝 시간(s)",
      tputStepHint: "처음 몇 스텝을 뺀 여러 스텝의 평균",
      tputGpus: "GPU 수(n)",
      tputGpu: "GPU(bf16 dense 최대 성능)",
      tputPeak: "GPU당 최대 성능(TFLOP/s)",
      tputPeakHint: "데이터시트에서 행렬곱 dtype의 희소성 없는(dense) 값",
      tputAc: "활성값 체크포인팅",
      tputAcNone: "안 함",
      tputAcFull: "모든 블록",
      tputTps: "GPU당 초당 토큰 수",
      tputModel: "토큰당 모델 FLOPs",
      tputHardware: "토큰당 하드웨어 FLOPs",
      tputAchieved: "GPU당 모델 TFLOP/s",
      tputMfu: "MFU",
      tputHfu: "HFU",
      tputAttnAgain: "어텐션 역전파가 점수를 다시 계산",
      tputBlocksAgain: "블록 순전파를 한 번 더",
      nodes: "노드 수",
      gpn: "노드당 GPU 수",
      launcher: "실행 방식",
      torchrun: "노드마다 torchrun",
      slurmTorchrun: "Slurm: srun torchrun",
      slurmPython: "Slurm: srun python(torchrun 없이)",
      k8s: "쿠버네티스(인덱스 잡)",
      script: "학습 스크립트",
      noteSingle: "그 노드에서 실행하세요. --standalone은 랑데부용 키-값 저장소를 이 노드의 빈 포트에 띄웁니다.",
      noteNodes: "모든 노드에서 같은 명령을 실행하세요. HEAD_NODE와 JOB_ID는 주석대로 정해 둡니다.",
      noteSlurmTorchrun:
        "파일로 저장해 sbatch로 제출하세요. 노드 2개, GPU 8개라면 snippets/launch/slurm_train.sbatch와 같습니다.",
      noteSlurmPython:
        "파일로 저장해 sbatch로 제출하세요. 프로그램이 env_vars.py의 env_from_slurm()처럼 SLURM_* 변수를 RANK, LOCAL_RANK 등으로 직접 옮겨야 합니다. 노드 2개, GPU 8개라면 snippets/launch/slurm_srun.sbatch와 같습니다.",
      noteK8s:
        "이름이 ddp인 인덱스 잡의 모든 파드가 실행할 명령입니다. 노드마다 파드 하나, 파드의 subdomain은 이름이 ddp인 헤드리스 서비스입니다. 노드 2개, GPU 4개라면 Job과 서비스를 담은 snippets/launch/k8s_ddp.yaml의 명령과 같습니다.",
    },
  };

  // Per-direction link rates; the first three are _report.LINKS of the performance page.
  const LINKS = [
    { name: "NVLink 4 (H100/H200 SXM)", rate: 450 },
    { name: "PCIe Gen5 x16", rate: 63 },
    { name: "PCIe Gen4 x16", rate: 31.5 },
    { name: "400 Gb/s (InfiniBand NDR)", rate: 50 },
    { name: "200 Gb/s (InfiniBand HDR)", rate: 25 },
  ];
  const LINK_EFFICIENCY = 80; // percent, _report.LINK_EFFICIENCY
  const MiB = 2 ** 20;

  // Bytes per element: weights, gradients, one optimizer state, FSDP2 all-gather (param_dtype).
  const PRECISION = {
    fp32: { w: 4, g: 4, s: 4, gather: 4 },
    amp: { w: 4, g: 4, s: 4, gather: 2 },
    bf16: { w: 2, g: 2, s: 2, gather: 2 },
  };
  const STATES = { sgd: 0, momentum: 1, adam: 2 }; // optimizer tensors per parameter

  let lang = "en";
  const t = (key) => TEXT[lang][key];

  function el(tag, attrs = {}, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs)) {
      if (key === "text") node.textContent = value;
      else node.setAttribute(key, value);
    }
    node.append(...children);
    return node;
  }

  function field(id, label, control, hint) {
    control.id = id;
    const wrap = el("div", { class: "calc-field" }, el("label", { for: id, text: label }), control);
    if (hint) wrap.append(el("small", { text: hint }));
    if (RULES[id]) {
      // what is wrong with the value, beside the field; the page's stylesheet greys every <small>, so colour it here
      const problem = el("small", { id: `${id}-problem`, class: "calc-problem", role: "alert", hidden: "" });
      Object.assign(problem.style, ERROR_STYLE);
      wrap.append(problem);
    }
    return wrap;
  }

  function input(value, mode = "decimal") {
    return el("input", { type: "text", inputmode: mode, value: String(value), autocomplete: "off", spellcheck: "false" });
  }

  function select(options, chosen) {
    const node = el("select");
    for (const [value, label] of options) {
      const option = el("option", { value, text: label });
      if (value === chosen) option.selected = true;
      node.append(option);
    }
    return node;
  }

  function checkbox(id, label) {
    const box = el("input", { type: "checkbox", id });
    return el("div", { class: "calc-field calc-check" }, box, el("label", { for: id, text: label }));
  }

  // What each field accepts: a range, whole numbers or not, and the one unit that may follow the number.
  // min is inclusive, above exclusive; max keeps the pages responsive (7B typed into a MiB field is 7e9 MiB).
  const RULES = {
    "mem-params": { min: 1, max: 1e15, example: "7B" },
    "mem-dp": { integer: true, min: 1, max: 1e6, example: "8" },
    "mem-tp": { integer: true, min: 1, max: 1e6, example: "1" },
    "mem-pp": { integer: true, min: 1, max: 1e6, example: "1" },
    "mem-unit": { min: 1, max: 1e15, example: "202M" },
    "mem-batch": { integer: true, min: 1, max: 1e6, example: "1" },
    "mem-seq": { integer: true, min: 1, max: 1e8, example: "4096" },
    "mem-hidden": { integer: true, min: 1, max: 1e6, example: "4096" },
    "mem-layers": { integer: true, min: 1, max: 1e5, example: "32" },
    "mem-heads": { integer: true, min: 1, max: 1e5, example: "32" },
    "mem-vocab": { integer: true, min: 1, max: 1e8, example: "32000" },
    "step-grad": { above: 0, max: 1e8, unit: "MiB", example: "1024" },
    "step-bucket": { above: 0, max: 1e6, unit: "MiB", example: "25" },
    "step-first": { above: 0, max: 1e6, unit: "MiB", example: "1" },
    "step-embed": { min: 0, max: 1e8, unit: "MiB", example: "147" },
    "step-rate": { above: 0, max: 1e5, unit: "GB/s", exactCase: true, example: "450" }, // not Gb/s
    "step-eff": { above: 0, max: 100, unit: "%", example: "80" },
    "step-alpha": { min: 0, max: 1e7, unit: "µs", example: "50" },
    "step-world": { integer: true, min: 1, max: 1e6, example: "8" },
    "step-compute": { min: 0, max: 1e7, unit: "ms", example: "200" },
    "step-backward": { min: 0, max: 100, unit: "%", example: "67" },
    "tput-params": { min: 1, max: 1e15, example: "7.5B" },
    "tput-layers": { integer: true, min: 1, max: 1e5, example: "32" },
    "tput-hidden": { integer: true, min: 1, max: 1e6, example: "4096" },
    "tput-seq": { integer: true, min: 1, max: 1e8, example: "8192" },
    "tput-vocab": { integer: true, min: 1, max: 1e8, example: "128256" },
    "tput-tokens": { min: 1, max: 1e12, example: "131072" },
    "tput-step": { above: 0, max: 1e6, unit: "s", other: /[mµu]s$/i, example: "2.84" }, // seconds, not ms
    "tput-gpus": { integer: true, min: 1, max: 1e6, example: "8" },
    "tput-peak": { above: 0, max: 1e6, unit: "TFLOP/s", example: "989" },
    "launch-nodes": { integer: true, min: 1, max: 1e5, example: "2" },
    "launch-gpus": { integer: true, min: 1, max: 1024, example: "8" },
    "launch-script-path": { text: true },
  };

  // "7B", "1.5e9", "202M", "33,672" -> a number; NaN when it is not one.
  function count(text) {
    const match = String(text)
      .replace(/[\s,_]/g, "")
      .match(/^(\d+(?:\.\d*)?(?:e[+-]?\d+)?)([kmgbt]?)$/i);
    if (!match) return NaN;
    const scale = { "": 1, k: 1e3, m: 1e6, g: 1e9, b: 1e9, t: 1e12 }[match[2].toLowerCase()];
    return parseFloat(match[1]) * scale;
  }

  // One field's text against its rule: { value } or { problem } (a key of TEXT.problems).
  function parse(text, rule) {
    let s = String(text).trim();
    if (!s) return { problem: "empty" };
    if (rule.text) return { value: s };
    if (rule.other && rule.other.test(s)) return { problem: "unit" }; // another unit ending like this one
    const ends = rule.exactCase ? s.endsWith(rule.unit) : rule.unit && s.toLowerCase().endsWith(rule.unit.toLowerCase());
    if (ends) s = s.slice(0, -rule.unit.length).trim();
    if (/^[-−]/.test(s)) return { problem: "negative" };
    const value = count(s);
    if (Number.isNaN(value)) return { problem: /^[\d.,_\s]+(e[+-]?\d+)?[kmgbt]?\s*\S/i.test(s) ? "unit" : "number" };
    if (!Number.isFinite(value) || value > rule.max) return { problem: "max" };
    if (rule.integer && !Number.isInteger(value)) return { problem: "integer" };
    if (rule.above !== undefined ? value <= rule.above : value < rule.min) return { problem: "min" };
    return { value };
  }

  // Reads fields by id, shows each one's problem beside it; returns { values, problems (labels) }.
  function readFields(controls, labels) {
    const values = {};
    const problems = [];
    for (const [key, control] of Object.entries(controls)) {
      if (!RULES[control.id] || control.disabled) continue;
      const rule = RULES[control.id];
      const result = parse(control.value, rule);
      values[key] = result.value;
      flag(control, result.problem && t("problems")[result.problem](rule));
      if (result.problem) problems.push(labels[key]);
    }
    return { values, problems };
  }

  // Shows (or clears) a message beside a field.
  function flag(control, message) {
    const problem = document.getElementById(`${control.id}-problem`);
    if (!problem) return;
    problem.textContent = message || "";
    problem.hidden = !message;
    if (message) control.setAttribute("aria-invalid", "true");
    else control.removeAttribute("aria-invalid");
  }

  const number = (x, digits = 0) =>
    x.toLocaleString(lang, { maximumFractionDigits: digits, minimumFractionDigits: 0 });

  function bytes(x) {
    if (x === 0) return "0 B";
    const units = ["B", "kB", "MB", "GB", "TB"];
    const binary = ["B", "KiB", "MiB", "GiB", "TiB"];
    const d = Math.min(units.length - 1, Math.max(0, Math.floor(Math.log10(x) / 3)));
    const b = Math.min(binary.length - 1, Math.max(0, Math.floor(Math.log2(x) / 10)));
    const first = d === 0 ? `${number(x)} B` : `${number(x / 10 ** (3 * d), 2)} ${units[d]}`;
    const second = b === 0 ? "" : ` (${number(x / 2 ** (10 * b), 2)} ${binary[b]})`;
    return first + second;
  }

  function table(headers, rows) {
    const head = el("tr", {}, ...headers.map((h) => el("th", { text: h })));
    const body = rows.map(([label, formula, value, attrs]) =>
      el("tr", attrs || {}, el("td", { text: label }), el("td", { class: "calc-formula", text: formula }), el("td", { class: "calc-value", text: value })),
    );
    return el("table", {}, el("thead", {}, head), el("tbody", {}, ...body));
  }

  // Solid red, readable in both colour schemes (Material's --md-typeset-del-color is a translucent background tint).
  const ERROR_STYLE = { color: "#d32f2f", fontWeight: "700" };

  function show(out, problems, build) {
    out.replaceChildren();
    if (problems.length) {
      const message = el("p", { class: "calc-error", text: t("invalid") + problems.join(", ") });
      Object.assign(message.style, ERROR_STYLE);
      out.append(message);
      return;
    }
    build();
  }

  // ---- memory per GPU ---------------------------------------------------------------------------
  // Model: the parallelism page (#memory-model, #reshard-after-forward), after ZeRO §3.1; activations: the count of
  // the large-model memory page, activation_bytes() in snippets/large_models/memory_breakdown.py.

  // Bytes one forward of a GPT-style block stack saves for backward (memory_breakdown.py's activation_bytes()).
  // residual: bytes per element of the residual stream (the LayerNorms' inputs); compute: of what the matmuls, the
  // attention and GELU save; stats: of LayerNorm's mean and rstd; mask: of a dropout mask (0: no dropout).
  function activationBytes(tokens, hidden, heads, layers, vocab, residual, compute, stats, mask, checkpointing) {
    const d = hidden;
    let block = tokens * (2 * residual * d + 14 * compute * d + 4 * stats + 4 * heads + 2 * mask * d);
    if (checkpointing) block = tokens * residual * d; // only the block's input; the rest is recomputed in backward
    const top = tokens * (residual * d + 2 * stats + compute * d + 4 * vocab); // last norm, head input, log-softmax
    return layers * block + top + 2 * 8 * tokens + 4; // + int64 token ids and targets, the loss's weight sum
  }

  // Element sizes of the activations: autocast keeps the residual stream in fp32 and computes the matmuls in bf16;
  // FSDP2's MixedPrecisionPolicy(param_dtype=bf16) computes everything in bf16. Statistics are fp32 on a GPU, and
  // dropout keeps a 1-byte mask there (the CUDA kernel's bool mask).
  function activationTypes(precision, layout) {
    if (precision === "fp32") return { residual: 4, compute: 4 };
    if (precision === "amp" && layout === "ddp") return { residual: 4, compute: 2 };
    return { residual: 2, compute: 2 };
  }

  function memory(psi, precision, optimizer, layout, dp, tp, pp, unit, bucketView, act) {
    const p = PRECISION[precision];
    const k = STATES[optimizer];
    const fsdp = layout !== "ddp";
    const split = tp * pp * (fsdp ? dp : 1); // DDP replicates over DP, FSDP2 shards over it
    const weights = (psi * p.w) / split;
    const grads = (psi * p.g) / split;
    const optState = (psi * k * p.s) / split;
    let transient; // DDP: the gradient buckets; FSDP2: the all-gathered parameters
    if (layout === "fsdpTrue") transient = (2 * unit * p.gather) / tp;
    else if (layout === "fsdpFalse") transient = (psi * p.gather) / (tp * pp);
    else transient = bucketView ? 0 : (psi * p.g) / (tp * pp);
    // FSDP2's backward: a unit's unsharded gradients (param_dtype) and its reduce-scatter input (reduce_dtype, fp32
    // unless everything is bf16), one unit each (set_reduce_scatter_max_input_buffers: 1 in flight by default)
    const backwardBuffers = fsdp ? (unit * (p.gather + p.g)) / tp : 0;
    // autocast under DDP keeps a bf16 copy of every matmul weight from forward to backward
    const copies = layout === "ddp" && precision === "amp" ? (psi * 2) / (tp * pp) : 0;
    const types = activationTypes(precision, layout);
    const count = (checkpointing) =>
      activationBytes(act.tokens, act.hidden, act.heads, act.layers, act.vocab, types.residual, types.compute, 4, act.dropout ? 1 : 0, checkpointing) / tp;
    const activations = count(act.checkpointing);
    // with checkpointing, backward recomputes one block at a time: one block's full activations on top
    const recompute = act.checkpointing ? (count(false) - count(true)) / act.layers : 0;
    const states = weights + grads + optState;
    const peak = states + transient + backwardBuffers + copies + activations + recompute;
    return { weights, grads, optState, states, transient, backwardBuffers, copies, activations, recompute, peak, types };
  }

  function buildMemory(root) {
    const f = {
      params: input("7B"),
      precision: select(["fp32", "amp", "bf16"].map((v) => [v, t(v)]), "amp"),
      optimizer: select(["sgd", "momentum", "adam"].map((v) => [v, t(v)]), "adam"),
      layout: select(["ddp", "fsdpTrue", "fsdpFalse"].map((v) => [v, t(v)]), "fsdpTrue"),
      dp: input(8),
      tp: input(1),
      pp: input(1),
      unit: input("202M"),
      batch: input(1),
      seq: input(4096),
      hidden: input(4096),
      layers: input(32),
      heads: input(32),
      vocab: input(32000),
      ac: select([["none", t("acNone")], ["full", t("acFull")]], "none"),
    };
    const view = checkbox("mem-bucket-view", t("bucketView"));
    const drop = checkbox("mem-dropout", t("dropout"));
    const form = el(
      "div",
      { class: "calc-form" },
      field("mem-params", t("params"), f.params, t("paramsHint")),
      field("mem-precision", t("precision"), f.precision),
      field("mem-optimizer", t("optimizer"), f.optimizer),
      field("mem-layout", t("layout"), f.layout),
      field("mem-dp", t("dp"), f.dp),
      field("mem-tp", t("tp"), f.tp),
      field("mem-pp", t("pp"), f.pp),
      field("mem-unit", t("unit"), f.unit, t("unitHint")),
      view,
      field("mem-batch", t("batch"), f.batch),
      field("mem-seq", t("seq"), f.seq),
      field("mem-hidden", t("hidden"), f.hidden),
      field("mem-layers", t("layers"), f.layers),
      field("mem-heads", t("heads"), f.heads),
      field("mem-vocab", t("vocab"), f.vocab),
      field("mem-ac", t("ac"), f.ac),
      drop,
    );
    const out = el("div", { class: "calc-output", id: "mem-output", "aria-live": "polite" });
    root.append(form, out);
    const box = view.querySelector("input");
    const dropBox = drop.querySelector("input");

    function update() {
      const layout = f.layout.value;
      f.unit.disabled = layout === "ddp";
      box.disabled = layout !== "ddp";
      if (f.unit.disabled) flag(f.unit, "");
      const labels = Object.fromEntries(Object.keys(f).map((key) => [key, t(key)]));
      const { values: v, problems } = readFields(f, labels);
      show(out, problems, () => {
        const precision = f.precision.value;
        const optimizer = f.optimizer.value;
        const p = PRECISION[precision];
        const k = STATES[optimizer];
        const { params: psi, dp, tp, pp } = v;
        const unit = layout === "ddp" ? 0 : Math.min(v.unit, psi); // no unit is larger than the model
        const act = {
          tokens: v.batch * v.seq,
          hidden: v.hidden,
          heads: v.heads,
          layers: v.layers,
          vocab: v.vocab,
          checkpointing: f.ac.value === "full",
          dropout: dropBox.checked,
        };
        const m = memory(psi, precision, optimizer, layout, dp, tp, pp, unit, box.checked, act);
        const fsdp = layout !== "ddp";
        const div = fsdp ? "(DP·TP·PP)" : "(TP·PP)";
        const divNum = fsdp ? `(${dp}·${tp}·${pp})` : `(${tp}·${pp})`;
        const psiText = number(psi);
        const row = (key, label, formula, value) => [label, formula, bytes(value), { id: `mem-${key}`, "data-bytes": String(value) }];
        const rows = [
          row("weights", t("weights"), `Ψ × ${p.w} B / ${div} = ${psiText} × ${p.w} / ${divNum}`, m.weights),
          row("grads", t("grads"), `Ψ × ${p.g} B / ${div} = ${psiText} × ${p.g} / ${divNum}`, m.grads),
          row("opt", t("optState"), `Ψ × ${k} × ${p.s} B / ${div} = ${psiText} × ${k * p.s} / ${divNum}`, m.optState),
          row("states", t("states"), `${t("weights")} + ${t("grads")} + ${t("optState")}`, m.states),
        ];
        const sum = [t("states")];
        if (layout === "fsdpTrue") {
          rows.push(row("transient", t("gathered"), `2 × ${number(unit)} × ${p.gather} B / ${tp}: ${t("twoUnits")}`, m.transient));
        } else if (layout === "fsdpFalse") {
          rows.push(row("transient", t("gathered"), `Ψ × ${p.gather} B / (TP·PP): ${t("allUnits")}`, m.transient));
        } else {
          const formula = box.checked ? t("bucketViews") : `Ψ × ${p.g} B / (TP·PP)`;
          rows.push(row("transient", t("buckets"), formula, m.transient));
        }
        sum.push(rows[4][0]);
        if (fsdp) {
          const formula = `${number(unit)} × (${p.gather} + ${p.g}) B / ${tp}: ${t("gradBuffersNote")}`;
          rows.push(row("backward", t("backwardBuffers"), formula, m.backwardBuffers));
          sum.push(t("backwardBuffers"));
        }
        if (m.copies) {
          rows.push(row("copies", t("copies"), `${t("copiesNote")} / (TP·PP)`, m.copies));
          sum.push(t("copies"));
        }
        const { residual: r, compute: c } = m.types;
        const n = `n = ${number(v.batch)} × ${number(v.seq)} = ${number(act.tokens)}`;
        const top = `${t("actTop")}: n·(${r + c}·d + 4·V + 24) + 4`;
        const perBlock = act.checkpointing
          ? `${t("actInputs")}: n·${r}·d`
          : `n·(${2 * r + 14 * c}·d + 16 + 4·h${act.dropout ? " + 2·d" : ""})`;
        const tpNote = tp > 1 ? `; ${t("actTp")}` : "";
        rows.push(row("activations", t("activations"), `${n}; L × ${t("actBlock")} ${perBlock}; ${top}${tpNote}`, m.activations));
        sum.push(t("activations"));
        if (act.checkpointing) {
          rows.push(row("recompute", t("recompute"), `n·(${2 * r + 14 * c}·d + 16 + 4·h${act.dropout ? " + 2·d" : ""}) − n·${r}·d`, m.recompute));
          sum.push(t("recompute"));
        }
        rows.push(row("peak", t("peak"), sum.join(" + "), m.peak));
        const perParam = p.w + p.g + k * p.s;
        out.append(
          table([t("item"), t("formula"), t("perGpu")], rows),
          el("p", {
            id: "mem-summary",
            text:
              `${t("gpus")}: DP × TP × PP = ${dp} × ${tp} × ${pp} = ${number(dp * tp * pp)}. ` +
              `${t("perParam")}: ${p.w} + ${p.g} + ${k} × ${p.s} = ${perParam} B (${t("zero")}). ${t("notCounted")}`,
          }),
        );
      });
    }
    form.addEventListener("input", update);
    form.addEventListener("change", update);
    update();
  }

  // ---- DDP step time ----------------------------------------------------------------------------
  // Model: the performance page (#performance-model), predict() in snippets/benchmark/ddp_benchmark.py; the calculator
  // adds the first layers' largest parameter to the last bucket.

  // DDP fills buckets in the order gradients become ready (last layers first) and closes one once it reaches the cap;
  // the first layers come last, so their largest parameter (`lastParam`, e.g. the token embedding) joins the last,
  // still open bucket, however large it is.
  function bucketsOf(total, cap, first, lastParam = 0) {
    const out = [];
    let left = total - lastParam;
    if (left > 0) {
      out.push(Math.min(first, left));
      left -= out[0];
    }
    while (left > 1e-9) {
      out.push(Math.min(cap, left));
      left -= out[out.length - 1];
    }
    if (lastParam > 0) {
      const limit = out.length === 1 ? first : cap;
      if (out.length && out[out.length - 1] < limit) out[out.length - 1] += lastParam;
      else out.push(lastParam);
    }
    return out;
  }

  // predict() of snippets/benchmark/ddp_benchmark.py: one bucket's all-reduce costs alpha + 2(n-1)/n x S / busbw
  // (alpha alone on one GPU); DDP starts it from a backward hook once the bucket's gradients are ready, one after
  // another, and waits for all of them when backward ends. Forward and the optimizer step hide nothing.
  function stepTime(gradBytes, capBytes, firstBytes, lastBytes, busbw, alpha, world, compute, backwardShare) {
    const buckets = bucketsOf(gradBytes, capBytes, firstBytes, lastBytes);
    const ring = (2 * (world - 1)) / world;
    const times = buckets.map((b) => alpha / 1e3 + ((ring * b) / (busbw * 1e9)) * 1e3);
    const comm = times.reduce((a, b) => a + b, 0);
    const last = times[times.length - 1];
    const backward = (compute * backwardShare) / 100;
    const total = buckets.reduce((a, b) => a + b, 0);
    // overlap: a bucket is ready once backward has made the gradients up to its end; no overlap: after backward
    const step = (overlap) => {
      let done = 0;
      let free = 0; // ms after backward starts
      buckets.forEach((size, i) => {
        done += size;
        const ready = backward * (overlap ? done / total : 1);
        free = Math.max(ready, free) + times[i];
      });
      return compute - backward + Math.max(backward, free);
    };
    return { buckets, ring, comm, last, noOverlap: step(false), overlap: step(true), backward };
  }

  function describeBuckets(buckets) {
    const groups = [];
    for (const b of buckets) {
      const size = number(b / MiB, 2);
      if (groups.length && groups[groups.length - 1][0] === size) groups[groups.length - 1][1] += 1;
      else groups.push([size, 1]);
    }
    return groups.map(([size, n]) => (n > 1 ? `${n} × ${size} MiB` : `${size} MiB`)).join(", ");
  }

  function buildStep(root) {
    const f = {
      grad: input(1024),
      bucket: input(25),
      first: input(1),
      embed: input(0),
      link: select([...LINKS.map((l, i) => [String(i), `${l.name}: ${l.rate} GB/s`]), ["custom", t("custom")]], "0"),
      rate: input(LINKS[0].rate),
      eff: input(LINK_EFFICIENCY),
      alpha: input(0),
      world: input(8),
      compute: input(200),
      backward: input(67),
    };
    const form = el(
      "div",
      { class: "calc-form" },
      field("step-grad", t("grad"), f.grad, t("gradHint")),
      field("step-bucket", t("bucket"), f.bucket),
      field("step-first", t("first"), f.first, t("firstHint")),
      field("step-embed", t("embed"), f.embed, t("embedHint")),
      field("step-link", t("link"), f.link),
      field("step-rate", t("rate"), f.rate),
      field("step-eff", t("eff"), f.eff, t("effHint")),
      field("step-alpha", t("alpha"), f.alpha, t("alphaHint")),
      field("step-world", t("world"), f.world),
      field("step-compute", t("compute"), f.compute, t("computeHint")),
      field("step-backward", t("backward"), f.backward, t("backwardHint")),
    );
    const out = el("div", { class: "calc-output", id: "step-output", "aria-live": "polite" });
    root.append(form, out);

    f.link.addEventListener("change", () => {
      if (f.link.value !== "custom") f.rate.value = String(LINKS[Number(f.link.value)].rate);
    });
    f.rate.addEventListener("input", () => {
      const preset = LINKS.findIndex((l) => String(l.rate) === f.rate.value.trim());
      f.link.value = preset >= 0 ? String(preset) : "custom";
    });

    function update() {
      const labels = Object.fromEntries(Object.keys(f).map((key) => [key, t(key)]));
      const { values: v, problems } = readFields(f, labels);
      if (!problems.includes(labels.embed) && !problems.includes(labels.grad) && v.embed > v.grad) {
        flag(f.embed, t("problems").embedTooBig());
        problems.push(labels.embed);
      }
      const valid = (key) => !problems.includes(labels[key]);
      if (valid("grad") && valid("bucket") && valid("first") && valid("embed")) {
        const n = Math.ceil(Math.max(0, v.grad - v.embed - v.first) / v.bucket) + 2; // bound the loop before it runs
        if (n > 1e5) {
          flag(f.bucket, t("problems").buckets(n));
          problems.push(labels.bucket);
        }
      }
      show(out, problems, () => {
        const { grad, bucket: cap, first, embed, rate, eff, alpha, world, compute, backward: share } = v;
        const busbw = (rate * eff) / 100;
        const s = stepTime(grad * MiB, cap * MiB, first * MiB, embed * MiB, busbw, alpha, world, compute, share);
        const speedNo = (world * compute) / s.noOverlap;
        const speedOv = (world * compute) / s.overlap;
        const ms = (x) => `${number(x, 3)} ms`;
        const row = (key, label, formula, text, value) => [label, formula, text, { id: `step-${key}`, "data-value": String(value) }];
        let rule = t("bucketRule")(number(first, 2), number(cap, 2));
        if (embed > 0) rule += `; ${t("lastRule")(number(embed, 2))}`;
        const fwd = `${t("fForward")} ${number(compute - s.backward, 3)}`;
        const bwd = `${t("fBackward")} ${number(s.backward, 3)}`;
        const rows = [
          row("busbw", t("busbw"), `${number(rate, 3)} GB/s × ${number(eff, 1)}%`, `${number(busbw, 3)} GB/s`, busbw),
          row("buckets", t("bucketList"), rule, `${s.buckets.length}: ${describeBuckets(s.buckets)}`, JSON.stringify(s.buckets)),
          row("comm", t("comm"), `Σ = Σᵢ (α + 2(n−1)/n × Sᵢ / busbw); α = ${number(alpha, 1)} µs, 2(n−1)/n = ${number(s.ring, 4)}`, ms(s.comm), s.comm),
          row("last", t("last"), `α + 2(n−1)/n × S_${t("fLast")} / busbw`, ms(s.last), s.last),
          row("no-overlap", t("noOverlap"), `${t("fCompute")} + Σ = ${number(compute, 3)} + ${number(s.comm, 3)}`, ms(s.noOverlap), s.noOverlap),
          row("overlap", t("overlap"), `${fwd} + max(${bwd}, ${t("fChain")})`, ms(s.overlap), s.overlap),
          row("speedup", t("speedup"), `n × ${t("fCompute")} / ${t("fStep")}`, `${number(speedNo, 2)}× (${t("noOvShort")}) / ${number(speedOv, 2)}× (${t("ovShort")})`, JSON.stringify([speedNo, speedOv])),
          row("efficiency", t("efficiency"), `${t("fCompute")} / ${t("fStep")}`, `${number((100 * speedNo) / world, 1)}% / ${number((100 * speedOv) / world, 1)}%`, JSON.stringify([speedNo / world, speedOv / world])),
        ];
        out.append(table([t("item"), t("formula"), t("value")], rows));
      });
    }
    form.addEventListener("input", update);
    form.addEventListener("change", update);
    update();
  }

  // ---- throughput and MFU -----------------------------------------------------------------------
  // Model: the throughput page (scaling/throughput.md), the functions of snippets/scaling/flops_mfu.py:
  // model_flops_per_token, hardware_flops_per_token, tokens_per_second and utilization.

  // bf16 dense peaks per GPU, TFLOP/s: the figures torchtitan's get_peak_flops takes from NVIDIA's datasheets
  const GPUS = [
    { name: "H100 SXM", peak: 989 },
    { name: "H200", peak: 989 },
    { name: "A100", peak: 312 },
    { name: "B200", peak: 2250 },
  ];

  // 6N + 12Lsd: 2 FLOPs per matmul weight and token forward, 4 backward; attention's two s × d products per layer
  const modelFlopsPerToken = (params, layers, hidden, seq) => 6 * params + 12 * layers * hidden * seq;

  // what the GPU runs: the model's FLOPs, the scores that attention's backward recomputes (2sd per layer) and, with
  // every block checkpointed, the blocks' forward again (recomputed: their matmul parameters)
  function hardwareFlopsPerToken(params, layers, hidden, seq, recomputed) {
    let flops = modelFlopsPerToken(params, layers, hidden, seq) + 2 * layers * hidden * seq;
    if (recomputed) flops += 2 * recomputed + 4 * layers * hidden * seq;
    return flops;
  }

  const tokensPerSecond = (tokens, stepSeconds, devices) => tokens / (stepSeconds * devices);
  const utilization = (flopsPerToken, tokens, stepSeconds, devices, peakFlops) =>
    (flopsPerToken * tokensPerSecond(tokens, stepSeconds, devices)) / peakFlops;

  function buildThroughput(root) {
    const f = {
      params: input("7.5B"),
      layers: input(32),
      hidden: input(4096),
      seq: input(8192),
      vocab: input(128256),
      tokens: input(131072),
      step: input(2.84),
      gpus: input(8),
      gpu: select([...GPUS.map((g, i) => [String(i), `${g.name}: ${g.peak} TFLOP/s`]), ["custom", t("custom")]], "0"),
      peak: input(GPUS[0].peak),
      ac: select([["none", t("tputAcNone")], ["full", t("tputAcFull")]], "none"),
    };
    const keys = {
      params: "tputParams",
      layers: "tputLayers",
      hidden: "tputHidden",
      seq: "tputSeq",
      vocab: "tputVocab",
      tokens: "tputTokens",
      step: "tputStep",
      gpus: "tputGpus",
      gpu: "tputGpu",
      peak: "tputPeak",
      ac: "tputAc",
    };
    const form = el(
      "div",
      { class: "calc-form" },
      field("tput-params", t("tputParams"), f.params, t("tputParamsHint")),
      field("tput-layers", t("tputLayers"), f.layers),
      field("tput-hidden", t("tputHidden"), f.hidden),
      field("tput-seq", t("tputSeq"), f.seq),
      field("tput-vocab", t("tputVocab"), f.vocab, t("tputVocabHint")),
      field("tput-tokens", t("tputTokens"), f.tokens, t("tputTokensHint")),
      field("tput-step", t("tputStep"), f.step, t("tputStepHint")),
      field("tput-gpus", t("tputGpus"), f.gpus),
      field("tput-gpu", t("tputGpu"), f.gpu),
      field("tput-peak", t("tputPeak"), f.peak, t("tputPeakHint")),
      field("tput-ac", t("tputAc"), f.ac),
    );
    const out = el("div", { class: "calc-output", id: "tput-output", "aria-live": "polite" });
    root.append(form, out);

    f.gpu.addEventListener("change", () => {
      if (f.gpu.value !== "custom") f.peak.value = String(GPUS[Number(f.gpu.value)].peak);
    });
    f.peak.addEventListener("input", () => {
      const preset = GPUS.findIndex((g) => String(g.peak) === f.peak.value.trim());
      f.gpu.value = preset >= 0 ? String(preset) : "custom";
    });

    function update() {
      const labels = Object.fromEntries(Object.entries(keys).map(([key, text]) => [key, t(text)]));
      const { values: v, problems } = readFields(f, labels);
      show(out, problems, () => {
        const { params, layers, hidden, seq, vocab, tokens, step, gpus, peak } = v;
        const full = f.ac.value === "full";
        // checkpointing every block recomputes the blocks' matmuls: all of N but the output layer (an upper bound: a
        // block's last matmul saves nothing for backward and is not recomputed, see the throughput page)
        const recomputed = full ? Math.max(0, params - vocab * hidden) : 0;
        const model = modelFlopsPerToken(params, layers, hidden, seq);
        const hardware = hardwareFlopsPerToken(params, layers, hidden, seq, recomputed);
        const tps = tokensPerSecond(tokens, step, gpus);
        const mfu = utilization(model, tokens, step, gpus, peak * 1e12);
        const hfu = utilization(hardware, tokens, step, gpus, peak * 1e12);
        const row = (key, label, formula, text, value) => [label, formula, text, { id: `tput-${key}`, "data-value": String(value) }];
        const giga = (x) => `${number(x / 1e9, 2)} GFLOP`;
        let hwFormula = `6N + 12Lsd + 2Lsd (${t("tputAttnAgain")})`;
        if (full) hwFormula += ` + 2(N − V·d) + 4Lsd (${t("tputBlocksAgain")})`;
        const rows = [
          row("tps", t("tputTps"), `T / (t · n) = ${number(tokens)} / (${number(step, 3)} · ${number(gpus)})`, number(tps, 1), tps),
          row("model", t("tputModel"), `6N + 12Lsd = 6 · ${number(params)} + 12 · ${layers} · ${number(seq)} · ${number(hidden)}`, giga(model), model),
          row("hardware", t("tputHardware"), hwFormula, giga(hardware), hardware),
          row("achieved", t("tputAchieved"), `${t("tputModel")} × ${t("tputTps")}`, number((model * tps) / 1e12, 1), (model * tps) / 1e12),
          row("mfu", t("tputMfu"), `${t("tputAchieved")} / ${number(peak, 1)}`, `${number(100 * mfu, 1)}%`, mfu),
          row("hfu", t("tputHfu"), `${t("tputHardware")} × ${t("tputTps")} / ${number(peak, 1)}`, `${number(100 * hfu, 1)}%`, hfu),
        ];
        out.append(table([t("item"), t("formula"), t("value")], rows));
      });
    }
    form.addEventListener("input", update);
    form.addEventListener("change", update);
    update();
  }

  // ---- launch commands --------------------------------------------------------------------------
  // Match snippets/launch/slurm_train.sbatch, slurm_srun.sbatch and the torchrun page for the same inputs.
  const DEFAULT_SCRIPT = {
    torchrun: "snippets/ddp/train_torchrun.py",
    slurmTorchrun: "snippets/ddp/train_torchrun.py",
    slurmPython: "snippets/launch/env_vars.py",
    k8s: "/workspace/train_torchrun.py", // the script's path inside the image, as in k8s_ddp.yaml
  };

  const sbatchLine = (option, comment) => (comment ? `#SBATCH ${option}`.padEnd(33) + ` # ${comment}` : `#SBATCH ${option}`);
  const continued = (first, args) => [first + " \\", ...args.map((a, i) => `    ${a}${i < args.length - 1 ? " \\" : ""}`)].join("\n");

  function launchScript(nodes, gpus, launcher, script) {
    if (launcher === "torchrun" && nodes === 1) {
      return `torchrun --standalone --nproc-per-node=${gpus} ${script}`;
    }
    if (launcher === "torchrun") {
      return [
        "# On every node, the same command. HEAD_NODE: the first node's host name or IP address;",
        "# JOB_ID: the same on every node of one job, different between jobs.",
        continued("torchrun", [
          `--nnodes=${nodes}`,
          `--nproc-per-node=${gpus}`,
          "--rdzv-backend=c10d",
          '--rdzv-endpoint="$HEAD_NODE:29400"',
          '--rdzv-id="$JOB_ID"',
          "--rdzv-conf=join_timeout=60",
          "--max-restarts=0",
          script,
        ]),
      ].join("\n");
    }
    if (launcher === "slurmTorchrun") {
      return [
        "#!/bin/bash",
        "# Multi-node DDP on Slurm: srun starts one torchrun per node, each torchrun one process per GPU.",
        "#SBATCH --job-name=ddp-torchrun",
        `#SBATCH --nodes=${nodes}`,
        sbatchLine("--ntasks-per-node=1", "one task per node: the torchrun agent"),
        `#SBATCH --gpus-per-node=${gpus}`,
        sbatchLine(`--cpus-per-task=${4 * gpus}`, `for all ${gpus} workers and their DataLoaders`),
        "#SBATCH --time=01:00:00",
        "",
        "set -euo pipefail",
        'head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        "# export NCCL_SOCKET_IFNAME=eth0  # only if NCCL picks the wrong network interface",
        "",
        "# one worker per GPU; on CPU nodes: NPROC_PER_NODE=2 sbatch --gpus-per-node=0 this-script",
        continued("srun torchrun", [
          '--nnodes="$SLURM_NNODES"',
          '--nproc-per-node="${NPROC_PER_NODE:-gpu}"',
          '--rdzv-id="$SLURM_JOB_ID"',
          "--rdzv-backend=c10d",
          '--rdzv-endpoint="$head_node:29500"',
          script,
        ]),
      ].join("\n");
    }
    if (launcher === "slurmPython") {
      return [
        "#!/bin/bash",
        "# Multi-node DDP on Slurm without torchrun: srun starts every training process itself.",
        "#SBATCH --job-name=ddp-srun",
        `#SBATCH --nodes=${nodes}`,
        sbatchLine(`--ntasks-per-node=${gpus}`, "one task per GPU"),
        sbatchLine(`--gpus-per-node=${gpus}`, "no per-task GPU binding: each task picks cuda:LOCAL_RANK"),
        "#SBATCH --cpus-per-task=4",
        "#SBATCH --time=01:00:00",
        "",
        "set -euo pipefail",
        'export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        "export MASTER_PORT=$((20000 + SLURM_JOB_ID % 10000))   # differs between jobs sharing a node",
        "",
        `srun python ${script}   # maps SLURM_* to RANK, WORLD_SIZE, ... itself`,
      ].join("\n");
    }
    return [
      `# Every pod of the Indexed Job "ddp" (completions: ${nodes}, one pod per node) runs this.`,
      `# Kubernetes sets JOB_COMPLETION_INDEX (0 to ${nodes - 1}); ddp-0.ddp is pod 0 through the headless Service "ddp".`,
      `# Each pod asks for nvidia.com/gpu: ${gpus}; torchrun starts one worker per GPU the pod gets.`,
      continued("torchrun", [
        `--nnodes=${nodes}`,
        '--nproc-per-node="${NPROC_PER_NODE:-gpu}"',
        '--node-rank="$JOB_COMPLETION_INDEX"',
        "--rdzv-backend=static",
        "--rdzv-endpoint=ddp-0.ddp:29500",
        script,
      ]),
    ].join("\n");
  }

  function buildLaunch(root) {
    const launchers = ["torchrun", "slurmTorchrun", "slurmPython", "k8s"];
    const f = {
      nodes: input(2),
      gpus: input(8),
      launcher: select(launchers.map((v) => [v, t(v)]), "slurmTorchrun"),
      script: input(DEFAULT_SCRIPT.slurmTorchrun, "text"),
    };
    const form = el(
      "div",
      { class: "calc-form" },
      field("launch-nodes", t("nodes"), f.nodes),
      field("launch-gpus", t("gpn"), f.gpus),
      field("launch-launcher", t("launcher"), f.launcher),
      field("launch-script-path", t("script"), f.script),
    );
    const code = el("code", { id: "launch-script" });
    const note = el("p", { id: "launch-note" });
    const out = el("div", { class: "calc-output", id: "launch-output", "aria-live": "polite" });
    root.append(form, out);
    let previous = f.launcher.value;

    function update() {
      // A default script follows the launcher; a script the reader typed stays.
      if (f.launcher.value !== previous) {
        if (f.script.value === DEFAULT_SCRIPT[previous]) f.script.value = DEFAULT_SCRIPT[f.launcher.value];
        previous = f.launcher.value;
      }
      const labels = { nodes: t("nodes"), gpus: t("gpn"), script: t("script") };
      const { values: v, problems } = readFields({ nodes: f.nodes, gpus: f.gpus, script: f.script }, labels);
      const [nodes, gpus, script] = [v.nodes, v.gpus, v.script];
      show(out, problems, () => {
        const launcher = f.launcher.value;
        code.textContent = launchScript(nodes, gpus, launcher, script);
        const key = { torchrun: nodes === 1 ? "noteSingle" : "noteNodes", slurmTorchrun: "noteSlurmTorchrun", slurmPython: "noteSlurmPython", k8s: "noteK8s" }[launcher];
        note.textContent = t(key);
        // long lines wrap instead of scrolling; copying keeps them whole
        const pre = el("pre", {}, code);
        Object.assign(pre.style, { whiteSpace: "pre-wrap", overflowWrap: "anywhere" });
        out.append(pre, note);
      });
    }
    form.addEventListener("input", update);
    form.addEventListener("change", update);
    update();
  }

  const BUILDERS = { memory: buildMemory, "step-time": buildStep, throughput: buildThroughput, launch: buildLaunch };

  function init() {
    lang = document.documentElement.lang.startsWith("ko") ? "ko" : "en";
    for (const root of document.querySelectorAll("[data-calc]")) {
      const build = BUILDERS[root.dataset.calc];
      if (!build || root.dataset.ready) continue;
      root.dataset.ready = "true";
      root.replaceChildren();
      build(root);
    }
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
