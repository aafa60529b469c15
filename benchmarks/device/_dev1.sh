rm -rf .device/catalogue .device/catalogue_old; tar -xJf .device/catalogue.tar.xz -C .device; source benchmarks/device/setup.sh >/dev/null
nvidia-smi --query-gpu=name --format=csv,noheader
M=mambaout_femto,levit_128s,tiny_vit_5m_224,ghostnetv2_100,efficientformerv2_s0,mobilevit_xxs,poolformerv2_s12,mobilenetv4_hybrid_medium,edgenext_xx_small,mobilevitv2_050,efficientvit_b0,fastvit_t8,convnextv2_atto,efficientnet_b0,mixnet_s,mobilenetv3_small_100,deit_tiny_patch16_224
PYTHONUNBUFFERED=1 timeout 400 python3 benchmarks/catalogue_e2e.py --from .device/catalogue --repeat 20 --force --stop-after 330 --model-timeout 60 --models $M --results-dir $OUT 2>&1 | tail -40
for i in 1 2; do for d in catalogue_old catalogue; do OP_TIMES_JSON=$OUT/op_times_${d}_$i.json timeout 40 python3 benchmarks/device/op_times.py .device/$d mambaout_femto 2>&1 | grep -i "depthwise\|total\|ms  " | head -4; done; done
