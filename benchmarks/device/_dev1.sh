rm -rf .device/catalogue; tar -xJf .device/catalogue.tar.xz -C .device; source benchmarks/device/setup.sh >/dev/null
nvidia-smi --query-gpu=name --format=csv,noheader
M=gmlp_ti16_224,coat_lite_tiny,gcvit_xxtiny,fastvit_mci0,swiftformer_xs,visformer_tiny,mixer_s32_224,hgnetv2_b0,fasternet_t0,efficientvit_m0,inception_next_atto,shvit_s1,xcit_nano_12_p16_224,repvit_m0_9,starnet_s1,mobilenetv4_conv_small,pvt_v2_b0,pit_ti_224,mambaout_femto
PYTHONUNBUFFERED=1 timeout 470 python3 benchmarks/catalogue_e2e.py --from .device/catalogue --repeat 20 --force --stop-after 400 --model-timeout 60 --models $M --results-dir $OUT 2>&1 | tail -30
